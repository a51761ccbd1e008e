// The fast tier's ablation (README.md): each unit of units.txt compiled with NVRTC as the
// CUDA backend compiles it (sm_90, IEEE flags), loaded with the driver API and timed with
// random code words rotating through >= 256 MB (L2 is 60 MB), bf16 x and f16 row scales
// (f32 for the exact tier's `simt` units, whose signature is x, codes, scales, table, y).
// The twins of each row count (and kind) are timed in interleaved rounds (15 rounds of 20 launches each),
// at their natural residency and again with at most 4 threadgroups per SM (dynamic shared
// memory padding), so twins of different register counts also compare at one residency.
// `ablation units.txt once` launches each unit once (for ncu). Garbage weights: only the time
// and, between twins that keep the decode, the output checksum mean anything.
// Build: g++ -O2 -std=c++17 ablation.cpp -I$CUDA/include -L$CUDA/lib64 -lcuda -lnvrtc
#include <cuda.h>
#include <nvrtc.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#define CU(x)                                                                   \
  do {                                                                          \
    CUresult r_ = (x);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char* s_ = nullptr;                                                 \
      cuGetErrorString(r_, &s_);                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

struct Unit {
  std::string file, sym, twin;
  unsigned rows, cols, k, threads, per_group = 16;
  bool simt = false;  // the exact SIMT reduce signature (x, codes, f32 scales, table, y)
  CUmodule mod;
  CUfunction fn;
  int regs, smem;
  std::vector<float> t[2];
};

static std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

static void compile(Unit& u) {
  const std::string src = slurp(u.file);
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src.c_str(), u.file.c_str(), 0, nullptr, nullptr);
  const char* opts[] = {"--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false", "--std=c++17",
                        "--gpu-architecture=sm_90"};
  if (nvrtcCompileProgram(prog, 6, opts) != NVRTC_SUCCESS) {
    size_t n;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, &log[0]);
    fprintf(stderr, "%s: %s\n", u.file.c_str(), log.c_str());
    exit(1);
  }
  size_t n;
  nvrtcGetCUBINSize(prog, &n);
  std::vector<char> bin(n);
  nvrtcGetCUBIN(prog, bin.data());
  nvrtcDestroyProgram(&prog);
  CU(cuModuleLoadData(&u.mod, bin.data()));
  CU(cuModuleGetFunction(&u.fn, u.mod, u.sym.c_str()));
  CU(cuFuncGetAttribute(&u.regs, CU_FUNC_ATTRIBUTE_NUM_REGS, u.fn));
  CU(cuFuncGetAttribute(&u.smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, u.fn));
}

int main(int argc, char** argv) {
  const char* list = argc > 1 ? argv[1] : "units.txt";
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  std::vector<Unit> units;
  {
    std::ifstream f(list);
    std::string file, sym;
    unsigned rows, cols, k, threads;
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string kind;
      if (!(ls >> file >> sym >> rows >> cols >> k >> threads)) continue;
      unsigned per_group = 16;
      if (ls >> kind >> per_group) {}
      Unit u;
      u.file = file;
      u.sym = sym;
      u.rows = rows;
      u.cols = cols;
      u.k = k;
      u.threads = threads;
      u.simt = kind == "simt";
      u.per_group = per_group;
      const size_t a = file.rfind('_'), b = file.rfind('.');
      u.twin = file.substr(a + 1, b - a - 1);
      compile(u);
      units.push_back(u);
    }
  }
  if (argc > 2 && std::string(argv[2]) == "once") {  // one launch of each (for ncu), garbage inputs
    for (auto& u : units) {
      const size_t words = (size_t)u.rows * u.cols * u.k / 32;
      CUdeviceptr dc, dx, ds, du, dy, null = 0;
      CU(cuMemAlloc(&dc, words * 4));
      CU(cuMemAlloc(&dx, u.cols * 2));
      CU(cuMemAlloc(&ds, u.rows * 4));
      CU(cuMemAlloc(&du, 8));
      CU(cuMemAlloc(&dy, u.rows * 2));
      CU(cuMemsetD8(dc, 0x5a, words * 4));
      CU(cuMemsetD8(dx, 0x3c, u.cols * 2));
      CU(cuMemsetD8(ds, 0x1c, u.rows * 4));
      CU(cuMemsetD8(du, 0, 8));
      void* args[] = {&dx, &dc, &ds, &null, &du, &dy, &null};
      void* sargs[] = {&dx, &dc, &ds, &null, &dy};
      CU(cuLaunchKernel(u.fn, (u.rows + u.per_group - 1) / u.per_group, 1, 1, u.threads, 1, 1, 0, 0, u.simt ? sargs : args, nullptr));
      CU(cuCtxSynchronize());
      cuMemFree(dc); cuMemFree(dx); cuMemFree(ds); cuMemFree(du); cuMemFree(dy);
    }
    return 0;
  }
  // mma and simt units apart, and units of another shape or k apart (the code words are
  // sized by the group's first unit)
  std::map<std::tuple<bool, unsigned, unsigned, unsigned>, std::vector<Unit*>> by_rows;
  for (auto& u : units) by_rows[{u.simt, u.rows, u.cols, u.k}].push_back(&u);
  std::mt19937 rng(20261203);
  printf("| rows | twin | registers | us (natural residency) | us (<= 4 groups per SM) | checksum |\n|---:|---|---:|---:|---:|---|\n");
  for (auto& [kind_rows, us] : by_rows) {
    const unsigned rows = std::get<1>(kind_rows);
    const unsigned cols = us[0]->cols, k = us[0]->k;
    const size_t words = (size_t)rows * cols * k / 32, nc = std::max<size_t>(2, (256u << 20) / (words * 4) + 1);
    std::vector<uint32_t> hc(words * nc);
    for (auto& w : hc) w = rng();
    std::vector<uint16_t> hx(cols), hs(2 * rows);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : hx) {
      float f = nd(rng);
      uint32_t b;
      memcpy(&b, &f, 4);
      v = (uint16_t)(b >> 16);
    }
    for (auto& s : hs) s = 0x1c00 + (rng() & 0x3ff);  // f16 in [2^-8, 2^-7)
    if (us[0]->simt)  // f32 scales in [2^-8, 2^-7)
      for (unsigned r = 0; r < rows; ++r) {
        const uint32_t b = 0x3b800000u + (rng() & 0x7fffffu);
        hs[2 * r] = (uint16_t)b;
        hs[2 * r + 1] = (uint16_t)(b >> 16);
      }
    const float unscale[2] = {1.0f, 1.0f};
    CUdeviceptr dc, dx, ds, du, dy;
    CU(cuMemAlloc(&dc, words * nc * 4));
    CU(cuMemAlloc(&dx, cols * 2));
    CU(cuMemAlloc(&ds, rows * 4));
    CU(cuMemAlloc(&du, 8));
    CU(cuMemAlloc(&dy, rows * 2));
    CU(cuMemcpyHtoD(dc, hc.data(), words * nc * 4));
    CU(cuMemcpyHtoD(dx, hx.data(), cols * 2));
    CU(cuMemcpyHtoD(ds, hs.data(), rows * 4));
    CU(cuMemcpyHtoD(du, unscale, 8));
    CUdeviceptr null = 0;
    // 48 KB of shared memory per group (the unit's static part plus padding): 4 per SM.
    auto launch = [&](Unit* u, size_t copy, unsigned smem) {
      CUdeviceptr c = dc + copy * words * 4;
      void* args[] = {&dx, &c, &ds, &null, &du, &dy, &null};
      void* sargs[] = {&dx, &c, &ds, &null, &dy};
      CU(cuLaunchKernel(u->fn, (rows + u->per_group - 1) / u->per_group, 1, 1, u->threads, 1, 1, smem, 0,
                        u->simt ? sargs : args, nullptr));
    };
    CUevent e0, e1;
    CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (Unit* u : us) launch(u, 0, 0);  // warm: module load, clocks
    CU(cuCtxSynchronize());
    for (int round = 0; round < 15; ++round)
      for (int mode = 0; mode < 2; ++mode)
        for (Unit* u : us) {
          CU(cuEventRecord(e0, 0));
          for (int i = 0; i < 20; ++i) launch(u, (round * 20 + i) % nc, mode ? 48 * 1024 - u->smem : 0);
          CU(cuEventRecord(e1, 0));
          CU(cuEventSynchronize(e1));
          float ms;
          CU(cuEventElapsedTime(&ms, e0, e1));
          u->t[mode].push_back(ms * 1000.0f / 20.0f);
        }
    for (Unit* u : us) {
      launch(u, 0, 0);
      CU(cuCtxSynchronize());
      std::vector<uint16_t> y(rows);
      CU(cuMemcpyDtoH(y.data(), dy, rows * 2));
      uint64_t sum = 0;
      for (auto v : y) sum = sum * 31 + v;
      auto med = [](std::vector<float> v) {
        std::sort(v.begin(), v.end());
        char s[64];
        snprintf(s, sizeof s, "%.2f [%.2f-%.2f]", v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10]);
        return std::string(s);
      };
      printf("| %u | %s | %d | %s | %s | %016llx |\n", rows, u->twin.c_str(), u->regs, med(u->t[0]).c_str(),
             med(u->t[1]).c_str(), (unsigned long long)sum);
      fflush(stdout);
    }
    cuMemFree(dc); cuMemFree(dx); cuMemFree(ds); cuMemFree(du); cuMemFree(dy);
  }
  return 0;
}
