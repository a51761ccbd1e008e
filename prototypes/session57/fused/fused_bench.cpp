// Fifty-seventh session: the fused prescale against the prescale kernel then the shipped
// kernel, at two M = 1 keys of Qwen3-14B (k 2: 17408 x 5120 "a", 5120 x 17408 "b").
// Every unit is compiled by NVRTC with the CUDA backend's options and launched through
// the driver API, both loaded at run time (no CUDA toolkit needed to build this):
//   g++ -O2 -std=c++17 fused_bench.cpp -ldl -o fused_bench
//   ./fused_bench [--compile-only]      (in this folder: it reads the .cu/.cuh files)
// Outputs are checked before timing: the fused forms against the prescale pipeline (bits
// where the group's slice is the sample, a relative difference where it is a split's).
// Times: the median of 30 samples, each 10 launches between two events, rotating through
// copies of the codes totalling at least 256 MB.
#include <dlfcn.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

typedef int CUresult;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;
typedef int nvrtcResult;
typedef void* nvrtcProgram;

#define FN(ret, name, ...) static ret (*name)(__VA_ARGS__)
FN(CUresult, cuInit, unsigned);
FN(CUresult, cuDeviceGet, int*, int);
FN(CUresult, cuDevicePrimaryCtxRetain, CUcontext*, int);
FN(CUresult, cuCtxSetCurrent, CUcontext);
FN(CUresult, cuModuleLoadData, CUmodule*, const void*);
FN(CUresult, cuModuleGetFunction, CUfunction*, CUmodule, const char*);
FN(CUresult, cuMemAlloc_v2, CUdeviceptr*, size_t);
FN(CUresult, cuMemcpyHtoD_v2, CUdeviceptr, const void*, size_t);
FN(CUresult, cuMemcpyDtoH_v2, void*, CUdeviceptr, size_t);
FN(CUresult, cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, size_t);
FN(CUresult, cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t);
FN(CUresult, cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
   void**, void**);
FN(CUresult, cuEventCreate, CUevent*, unsigned);
FN(CUresult, cuEventRecord, CUevent, void*);
FN(CUresult, cuEventSynchronize, CUevent);
FN(CUresult, cuEventElapsedTime, float*, CUevent, CUevent);
FN(CUresult, cuCtxSynchronize);
FN(CUresult, cuGetErrorString, CUresult, const char**);
FN(nvrtcResult, nvrtcCreateProgram, nvrtcProgram*, const char*, const char*, int, const char* const*,
   const char* const*);
FN(nvrtcResult, nvrtcAddNameExpression, nvrtcProgram, const char*);
FN(nvrtcResult, nvrtcCompileProgram, nvrtcProgram, int, const char* const*);
FN(nvrtcResult, nvrtcGetProgramLogSize, nvrtcProgram, size_t*);
FN(nvrtcResult, nvrtcGetProgramLog, nvrtcProgram, char*);
FN(nvrtcResult, nvrtcGetCUBINSize, nvrtcProgram, size_t*);
FN(nvrtcResult, nvrtcGetCUBIN, nvrtcProgram, char*);
FN(nvrtcResult, nvrtcGetLoweredName, nvrtcProgram, const char*, const char**);

static void* open_any(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
  return nullptr;
}
#define LOAD(h, name) (name = (decltype(name))dlsym(h, #name))
static void ck(CUresult r, const char* what) {
  if (r == 0) return;
  const char* s = "?";
  if (cuGetErrorString) cuGetErrorString(r, &s);
  printf("FAILED %s: %d %s\n", what, r, s);
  exit(1);
}
#define CK(x) ck((x), #x)

static std::string read(const std::string& path) {
  std::ifstream f(path);
  if (!f) { printf("FAILED: no %s\n", path.c_str()); exit(1); }
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The kernel name of a rendered unit: the identifier after `extern "C" __global__ void`
// (and `KERNEL_ATTRS`).
static std::string kernel_name(const std::string& src) {
  size_t p = src.find("extern \"C\" __global__ void ");
  p += strlen("extern \"C\" __global__ void ");
  if (src.compare(p, 13, "KERNEL_ATTRS ") == 0) p += 13;
  size_t e = src.find('(', p);
  return src.substr(p, e - p);
}

struct Compiled {
  std::vector<char> cubin;
  std::vector<std::string> lowered;
};

// NVRTC with the CUDA backend's options (src/backend/cuda.rs `nvrtc_options`).
static Compiled compile(const std::string& name, const std::string& src, const std::vector<std::string>& exprs) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src.c_str(), name.c_str(), 0, nullptr, nullptr)) { printf("FAILED create %s\n", name.c_str()); exit(1); }
  for (auto& e : exprs) nvrtcAddNameExpression(prog, e.c_str());
  const char* opts[] = {"--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false", "--std=c++17",
                        "--gpu-architecture=sm_90", "-Xptxas=-v"};
  nvrtcResult r = nvrtcCompileProgram(prog, 7, opts);
  size_t n;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, &log[0]);
  // ptxas's registers and spills, one line.
  std::string regs;
  for (size_t p = log.find("Used "); p != std::string::npos; p = log.find("Used ", p + 1)) regs = log.substr(p, log.find('\n', p) - p);
  size_t sp = log.find("bytes spill stores");
  std::string spills = sp == std::string::npos ? "" : log.substr(log.rfind('\n', sp) + 1, log.find('\n', sp) - log.rfind('\n', sp) - 1);
  printf("compiled %-12s %s | %s\n", name.c_str(), r ? "FAILED" : regs.c_str(), spills.c_str());
  if (r) { printf("%s\n", log.c_str()); exit(1); }
  Compiled c;
  nvrtcGetCUBINSize(prog, &n);
  c.cubin.resize(n);
  nvrtcGetCUBIN(prog, c.cubin.data());
  for (auto& e : exprs) {
    const char* low;
    nvrtcGetLoweredName(prog, e.c_str(), &low);
    c.lowered.push_back(low);
  }
  return c;
}

static CUfunction function(const Compiled& c, const std::string& name) {
  CUmodule m;
  CK(cuModuleLoadData(&m, c.cubin.data()));
  CUfunction f;
  CK(cuModuleGetFunction(&f, m, name.c_str()));
  return f;
}

static uint16_t bf16_of(float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
static float f_of_bf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float v;
  memcpy(&v, &b, 4);
  return v;
}

static CUdeviceptr alloc(size_t bytes) {
  CUdeviceptr p;
  CK(cuMemAlloc_v2(&p, bytes));
  CK(cuMemsetD8_v2(p, 0, bytes));
  return p;
}

struct Launch {
  CUfunction f;
  unsigned gx, gy, threads;
};

static void launch(const Launch& l, std::vector<void*> args) {
  CK(cuLaunchKernel(l.f, l.gx, l.gy, 1, l.threads, 1, 1, 0, nullptr, args.data(), nullptr));
}

// Median us a call of `body(i)` (i: the rotation index), 30 samples of 10 calls.
static double time_us(const std::function<void(int)>& body) {
  CUevent a, b;
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  int i = 0;
  for (int w = 0; w < 20; ++w) body(i++);
  std::vector<double> s;
  for (int k = 0; k < 30; ++k) {
    CK(cuEventRecord(a, nullptr));
    for (int r = 0; r < 10; ++r) body(i++);
    CK(cuEventRecord(b, nullptr));
    CK(cuEventSynchronize(b));
    float ms;
    CK(cuEventElapsedTime(&ms, a, b));
    s.push_back(ms * 100.0);  // us a call
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

struct Case {
  const char* name;
  unsigned rows, cols, wpr, gx, gy, threads, ws_words;
  const char *win, *sh, *fused, *fusedg;  // unit files (fusedg may be null)
  bool same_bits;                         // fused: the prescale pipeline's bits
};

int main(int argc, char** argv) {
  const bool compile_only = argc > 1 && !strcmp(argv[1], "--compile-only");
  void* nv = open_any({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"});
  if (!nv) { printf("FAILED: no NVRTC\n"); return 1; }
  LOAD(nv, nvrtcCreateProgram); LOAD(nv, nvrtcAddNameExpression); LOAD(nv, nvrtcCompileProgram);
  LOAD(nv, nvrtcGetProgramLogSize); LOAD(nv, nvrtcGetProgramLog); LOAD(nv, nvrtcGetCUBINSize);
  LOAD(nv, nvrtcGetCUBIN); LOAD(nv, nvrtcGetLoweredName);

  const std::string ps_src = read("../../session56/prescale_base.cuh") +
                             "\n#define PRESCALE_THREADS 512u\n#define FIRSTS 32u\n" +
                             read("../../session56/prescale_v3.cuh");
  Compiled ps = compile("prescale_v3", ps_src, {"prescale_v3<5120u>", "prescale_v3<17408u>"});
  Case cases[] = {
      {"17408x5120 k2 M1", 17408, 5120, 320, 1088, 1, 256, 1, "win_a.cu", "sh_a.cu", "fused_a.cu", "fusedg_a.cu", true},
      {"5120x17408 k2 M1", 5120, 17408, 1088, 320, 8, 128, 8 * 5120 + 320, "win_b.cu", "sh_b.cu", "fused_b.cu", nullptr, false},
  };
  struct Units { Compiled win, sh, fused, fusedg; std::string nwin, nsh, nfused, nfusedg; };
  std::vector<Units> units;
  for (auto& c : cases) {
    Units u;
    std::string s = read(c.win); u.nwin = kernel_name(s); u.win = compile(std::string(c.name).substr(0, 5) + " win", s, {});
    s = read(c.sh); u.nsh = kernel_name(s); u.sh = compile(std::string(c.name).substr(0, 5) + " sh", s, {});
    s = read(c.fused); u.nfused = kernel_name(s); u.fused = compile(std::string(c.name).substr(0, 5) + " fused", s, {});
    if (c.fusedg) { s = read(c.fusedg); u.nfusedg = kernel_name(s); u.fusedg = compile(std::string(c.name).substr(0, 5) + " fusedg", s, {}); }
    units.push_back(u);
  }
  if (compile_only) return 0;

  void* cu = open_any({"libcuda.so.1", "libcuda.so"});
  if (!cu) { printf("FAILED: no libcuda\n"); return 1; }
  LOAD(cu, cuInit); LOAD(cu, cuDeviceGet); LOAD(cu, cuDevicePrimaryCtxRetain); LOAD(cu, cuCtxSetCurrent);
  LOAD(cu, cuModuleLoadData); LOAD(cu, cuModuleGetFunction); LOAD(cu, cuMemAlloc_v2); LOAD(cu, cuMemcpyHtoD_v2);
  LOAD(cu, cuMemcpyDtoH_v2); LOAD(cu, cuMemcpyDtoD_v2); LOAD(cu, cuMemsetD8_v2); LOAD(cu, cuLaunchKernel);
  LOAD(cu, cuEventCreate); LOAD(cu, cuEventRecord); LOAD(cu, cuEventSynchronize); LOAD(cu, cuEventElapsedTime);
  LOAD(cu, cuCtxSynchronize); LOAD(cu, cuGetErrorString);
  CK(cuInit(0));
  int dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));

  for (size_t ci = 0; ci < 2; ++ci) {
    const Case& c = cases[ci];
    const Units& u = units[ci];
    std::mt19937 rng(20261207 + ci);
    // Codes: every bit pattern is a valid code; copies to rotate past L2.
    const size_t words = (size_t)c.rows * c.wpr, bytes = words * 4;
    const int copies = (int)((256u << 20) / bytes) + 1;
    std::vector<uint32_t> hc(words);
    for (auto& w : hc) w = rng();
    CUdeviceptr codes = alloc(bytes * copies);
    for (int k = 0; k < copies; ++k) CK(cuMemcpyHtoD_v2(codes + k * bytes, hc.data(), bytes));
    std::vector<uint16_t> hs(c.rows);
    for (auto& s : hs) s = (uint16_t)(0x3800u + rng() % 0x400u);  // f16 in [0.5, 1)
    CUdeviceptr scales = alloc(c.rows * 2);
    CK(cuMemcpyHtoD_v2(scales, hs.data(), c.rows * 2));
    // x: Gaussian bf16 at a magnitude far from 1 (so the power of two matters), one
    // value tiny against the rest (the flag raised).
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<uint16_t> hx(c.cols);
    for (auto& v : hx) v = bf16_of(g(rng) * 3000.0f);
    hx[7] = bf16_of(1e-7f);
    CUdeviceptr x = alloc(c.cols * 2), xs = alloc(c.cols * 2), table = alloc(64), unscale = alloc(32),
                powers = alloc(8), y = alloc(c.rows * 2), ws = alloc(c.ws_words * 4), flags = alloc(64),
                pflags = alloc(64);
    CK(cuMemcpyHtoD_v2(x, hx.data(), c.cols * 2));
    const float pw[2] = {1.0f, 1.0f};
    CK(cuMemcpyHtoD_v2(powers, pw, 8));
    Launch lp{function(ps, ps.lowered[ci]), 1, 1, 512};
    Launch lwin{function(u.win, u.nwin), c.gx, c.gy, c.threads}, lsh{function(u.sh, u.nsh), c.gx, c.gy, c.threads},
        lf{function(u.fused, u.nfused), c.gx, c.gy, c.threads};
    Launch lg{c.fusedg ? function(u.fusedg, u.nfusedg) : nullptr, c.gx, c.gy, c.threads};
    auto cp = [&](int i) { return codes + (size_t)(i % copies) * bytes; };
    auto prescale = [&] { launch(lp, {&x, &powers, &xs, &unscale, &pflags}); };
    auto run = [&](const Launch& l, int i) {
      CUdeviceptr cw = cp(i);
      launch(l, {&xs, &cw, &scales, &table, &unscale, &y, &ws});
    };
    auto runf = [&](const Launch& l, int i) {
      CUdeviceptr cw = cp(i);
      launch(l, {&x, &cw, &scales, &table, &unscale, &y, &ws, &flags});
    };
    auto out = [&] {
      CK(cuCtxSynchronize());
      std::vector<uint16_t> h(c.rows);
      CK(cuMemcpyDtoH_v2(h.data(), y, c.rows * 2));
      CK(cuMemsetD8_v2(y, 0xFF, c.rows * 2));
      return h;
    };
    prescale(); run(lwin, 0);
    const auto ref = out();
    uint32_t pf, ff[8];
    CK(cuMemcpyDtoH_v2(&pf, pflags, 4));
    float us0;
    CK(cuMemcpyDtoH_v2(&us0, unscale, 4));
    prescale(); run(lsh, 0);
    const auto rsh = out();
    auto compare = [&](const char* what, const std::vector<uint16_t>& got) {
      size_t differ = 0;
      double worst = 0, ymax = 0;
      for (size_t r = 0; r < ref.size(); ++r) ymax = std::max(ymax, (double)fabsf(f_of_bf16(ref[r])));
      for (size_t r = 0; r < ref.size(); ++r)
        if (got[r] != ref[r]) {
          ++differ;
          worst = std::max(worst, fabs((double)f_of_bf16(got[r]) - f_of_bf16(ref[r])) / ymax);
        }
      printf("%s %-28s %zu of %zu outputs differ from the prescale + shipped kernel's (worst %.3g of max |y|)\n", c.name,
             what, differ, ref.size(), worst);
      return differ;
    };
    compare("shared-x kernel after prescale", rsh);
    CK(cuMemsetD8_v2(flags, 0, 64));
    runf(lf, 0);
    const auto rf = out();
    size_t d = compare("fused (staged)", rf);
    CK(cuMemcpyDtoH_v2(ff, flags, 32));
    printf("%s flags: prescale %u (2^e %g), fused %u %u %u %u %u %u %u %u; fused bits %s\n", c.name, pf, us0, ff[0], ff[1],
           ff[2], ff[3], ff[4], ff[5], ff[6], ff[7], c.same_bits ? (d ? "DIFFER" : "same") : "(per-slice powers)");
    if (lg.f) {
      runf(lg, 0);
      const auto rg = out();
      size_t dg = compare("fused (global x)", rg);
      printf("%s fused (global x) bits %s\n", c.name, dg ? "DIFFER" : "same");
    }
    const double t_p = time_us([&](int) { prescale(); });
    const double t_win = time_us([&](int i) { run(lwin, i); });
    const double t_pwin = time_us([&](int i) { prescale(); run(lwin, i); });
    const double t_sh = time_us([&](int i) { run(lsh, i); });
    const double t_psh = time_us([&](int i) { prescale(); run(lsh, i); });
    const double t_f = time_us([&](int i) { runf(lf, i); });
    const double t_g = lg.f ? time_us([&](int i) { runf(lg, i); }) : 0.0;
    printf("%s us: prescale alone %.2f | shipped %.2f, after prescale %.2f | shared x %.2f, after prescale %.2f | fused staged %.2f",
           c.name, t_p, t_win, t_pwin, t_sh, t_psh, t_f);
    if (lg.f) printf(" | fused global %.2f", t_g);
    printf("\n");
  }
  return 0;
}
