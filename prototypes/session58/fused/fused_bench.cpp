// Fifty-eighth session (a copy of ../../session57/fused/fused_bench.cpp, other units):
// the template's reworked fused_x beside the fifty-seventh session's forms.
// Fifty-seventh session: the fused prescale against the prescale kernel then the shipped
// kernel, at two M = 1 keys of Qwen3-14B (k 2: 17408 x 5120 "a", 5120 x 17408 "b").
// Every unit is compiled by NVRTC with the CUDA backend's options and launched through
// the driver API, both loaded at run time (no CUDA toolkit needed to build this):
//   g++ -O2 -std=c++17 fused_bench.cpp -ldl -o fused_bench
//   python3 fused_gen.py && ./fused_bench [--compile-only]   (in this folder: it reads
//   the .cu/.cuh files; the fused ones are fused_gen.py's)
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

// One kernel of a case: its unit, its split count (GROUP_Y), whether it reads raw x (the
// fused forms) and, if so, whether its bits must be the prescale pipeline's.
struct Variant {
  const char* label;
  const char* file;
  unsigned row_tiles, k_split;
  bool fused, same_bits;
  bool shipped_form = false;  // rendered by the shipped template with `fused_x`: `unscale` is the table powers
};
struct Case {
  const char* name;
  unsigned rows, cols, wpr, m, threads;
  std::vector<Variant> variants;  // the first: the shipped winner (the reference)
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
                             read("../../session56/prescale_v3.cuh");  // the shipped prescale kernel
  Compiled ps = compile("prescale_v3", ps_src, {"prescale_v3<5120u>", "prescale_v3<17408u>"});
  const std::string P = "../../session57/fused/";  // the fifty-seventh session's units
  std::vector<Case> cases = {
      {"17408x5120 k2 M1", 17408, 5120, 320, 1, 256,
       {{"shipped (global x)", "win_a.cu", 1, 1, false, false},
        {"template: staged, batched", "ts_a.cu", 1, 1, false, false},
        {"prototype: fused staged", "fused_a.cu", 1, 1, true, true},
        {"template57: fused_x", "tf_a.cu", 1, 1, true, true, true},
        {"template58: fused_x", "./tf_a.cu", 1, 1, true, true, true},
        {"template58: fused_x, ew", "./tf_a_ew.cu", 1, 1, true, true, true}}},
      {"5120x17408 k2 M1", 5120, 17408, 1088, 1, 128,
       {{"shipped (global x)", "win_b.cu", 1, 8, false, false},
        {"template: staged, batched", "ts_b.cu", 1, 8, false, false},
        {"prototype: fused, no cap", "fused_b_nocap.cu", 1, 8, true, false},
        {"template57: fused_x", "tf_b.cu", 1, 8, true, false, true},
        {"template58: fused_x", "./tf_b.cu", 1, 8, true, false, true},
        {"template58: fused_x, 48", "./tf_b48.cu", 1, 8, true, false, true}}},
  };

  std::vector<std::vector<std::pair<Compiled, std::string>>> units;
  for (auto& c : cases) {
    units.emplace_back();
    for (auto& v : c.variants) {
      const std::string s = read(v.file[0] == '.' ? std::string(v.file) : P + v.file);
      units.back().emplace_back(compile(std::string(c.name).substr(0, 5) + " " + v.label, s, {}), kernel_name(s));
    }
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

  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
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
    // x: Gaussian bf16 at a magnitude far from f16's sweet spot (so the power of two is
    // not 1), each split's slice at its own magnitude (so per-slice powers differ), one
    // value tiny against the rest (the flag raised).
    std::normal_distribution<float> g(0.0f, 1.0f);
    // Sample s at its own magnitude too (2^(s % 5)); sample 3 (where there is one) has a
    // second tiny value.
    const size_t nx = (size_t)c.m * c.cols;
    std::vector<uint16_t> hx(nx);
    for (size_t j = 0; j < nx; ++j) {
      const size_t s = j / c.cols, i = j % c.cols;
      hx[j] = bf16_of(g(rng) * 0.02f * (float)(1u << (i * 8 / c.cols)) * (float)(1u << (s % 5)));
    }
    hx[7] = bf16_of(1e-12f);
    if (c.m > 3) hx[3 * c.cols + 100] = bf16_of(-1e-12f);
    CUdeviceptr x = alloc(nx * 2), xs = alloc(nx * 2), table = alloc(64), unscale = alloc((c.m + 8) * 4),
                powers = alloc(8), y = alloc((size_t)c.m * c.rows * 2),
                ws = alloc(((size_t)8 * c.m * c.rows + 4096) * 4), flags = alloc(8 * 16 * 4), pflags = alloc(64);
    CK(cuMemcpyHtoD_v2(x, hx.data(), nx * 2));
    const float pw[2] = {1.0f, 1.0f};
    CK(cuMemcpyHtoD_v2(powers, pw, 8));
    Launch lp{function(ps, ps.lowered[c.cols == 5120 ? 0 : 1]), c.m, 1, 512};
    auto cp = [&](int i) { return codes + (size_t)(i % copies) * bytes; };
    auto prescale = [&] { launch(lp, {&x, &powers, &xs, &unscale, &pflags}); };
    std::vector<Launch> ls;
    for (size_t k = 0; k < c.variants.size(); ++k)
      ls.push_back({function(units[ci][k].first, units[ci][k].second), (c.rows + 15) / 16 / c.variants[k].row_tiles,
                    c.variants[k].k_split, c.threads});
    auto run = [&](size_t k, int i) {
      CUdeviceptr cw = cp(i);
      if (c.variants[k].shipped_form) launch(ls[k], {&x, &cw, &scales, &table, &powers, &y, &ws});
      else if (c.variants[k].fused) launch(ls[k], {&x, &cw, &scales, &table, &unscale, &y, &ws, &flags});
      else launch(ls[k], {&xs, &cw, &scales, &table, &unscale, &y, &ws});
    };
    auto out = [&] {
      CK(cuCtxSynchronize());
      std::vector<uint16_t> h((size_t)c.m * c.rows);
      CK(cuMemcpyDtoH_v2(h.data(), y, h.size() * 2));
      CK(cuMemsetD8_v2(y, 0xFF, h.size() * 2));
      return h;
    };
    prescale();
    run(0, 0);
    const auto ref = out();
    std::vector<uint32_t> pf(c.m);
    CK(cuMemcpyDtoH_v2(pf.data(), pflags, c.m * 4));
    float us0;
    CK(cuMemcpyDtoH_v2(&us0, unscale, 4));
    std::string pfl;
    for (unsigned s2 = 0; s2 < c.m; ++s2) if (pf[s2]) pfl += std::to_string(s2) + " ";
    printf("%s: the prescale kernel's 2^e of sample 0 %g, flags raised for samples: %s\n", c.name, us0, pfl.c_str());
    double ymax = 0;
    for (auto h : ref) ymax = std::max(ymax, (double)fabsf(f_of_bf16(h)));
    for (size_t k = 1; k < c.variants.size(); ++k) {
      const Variant& v = c.variants[k];
      CK(cuMemsetD8_v2(flags, 0xFF, 8 * 16 * 4));
      if (!v.fused) prescale();
      run(k, 0);
      const auto got = out();
      size_t differ = 0;
      double worst = 0;
      for (size_t r = 0; r < ref.size(); ++r)
        if (got[r] != ref[r]) {
          ++differ;
          worst = std::max(worst, fabs((double)f_of_bf16(got[r]) - f_of_bf16(ref[r])) / ymax);
        }
      uint32_t ff[8 * 16];
      CK(cuMemcpyDtoH_v2(ff, flags, sizeof ff));
      std::string fl = "raised (split.sample):";
      for (unsigned z = 0; z < v.k_split * c.m; ++z)
        if (ff[z]) fl += " " + std::to_string(z / c.m) + "." + std::to_string(z % c.m);
      const bool bad = (v.fused && v.same_bits && differ) || (!v.fused && differ);
      printf("%s %-26s %5zu of %zu outputs differ from the shipped pipeline's (worst %.3g of max |y|)%s%s%s\n", c.name,
             v.label, differ, ref.size(), worst, v.fused ? "; flags " : "", v.fused ? fl.c_str() : "",
             bad ? " DIFFER" : "");
    }
    const double t_p = time_us([&](int) { prescale(); });
    printf("%s us: prescale alone %.2f\n", c.name, t_p);
    for (size_t k = 0; k < c.variants.size(); ++k) {
      const double t = time_us([&](int i) { run(k, i); });
      if (c.variants[k].fused) {
        printf("%s us: %-26s %.2f\n", c.name, c.variants[k].label, t);
      } else {
        const double tp = time_us([&](int i) { prescale(); run(k, i); });
        printf("%s us: %-26s %.2f, after the prescale kernel %.2f\n", c.name, c.variants[k].label, t, tp);
      }
    }
  }
  return 0;
}
