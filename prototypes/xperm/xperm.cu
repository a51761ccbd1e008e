// x permuted per 1024-column slice (prototypes/xperm/README.md): each table winner
// (unit_*.cu) against its twin reading x permuted (perm_*.cu), bit for bit, then timed
// alone and with the permuting launch in front. Random code words (10 copies, >= 256 MB:
// L2 is 60 MB), x and row scales; 15 interleaved rounds of 20 launches per kernel, the
// median, p10 and p90 of the per-launch times.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

typedef void (*Launch)(dim3, dim3, const void*, const void*, const void*, void*);
#define UNIT(name)                                                                   \
  extern "C" void launch_unit_##name(dim3, dim3, const void*, const void*, const void*, void*); \
  extern "C" void launch_perm_##name(dim3, dim3, const void*, const void*, const void*, void*);
UNIT(m4_5120)
UNIT(m8_5120)
UNIT(m4_17408)
UNIT(m1_5120)

// Lane l's 16-byte chunk q of its run (columns 32 l + 8 q .. + 7 of the slice) goes to
// chunk 32 q + l of the slice: a warp's four loads per sample read 512 contiguous bytes.
__global__ void permute_x(const uint4* __restrict__ x, uint4* __restrict__ xp, unsigned chunks) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // destination chunk
  if (i >= chunks) return;
  const unsigned slice = i >> 7, q = (i >> 5) & 3u, l = i & 31u;
  xp[i] = x[slice * 128u + l * 4u + q];
}

struct Config {
  const char* name;
  Launch unit, perm;
  unsigned rows, cols, m, k, rpg, rps;
};

int main() {
  std::vector<Config> cs = {
      {"5120 x 17408 k 3 M 4 (rpg 1 rps 2 prefetch)", launch_unit_m4_5120, launch_perm_m4_5120, 5120, 17408, 4, 3, 1, 2},
      {"5120 x 17408 k 2 M 8 (rpg 2 rps 4 regs 168 prefetch stream)", launch_unit_m8_5120, launch_perm_m8_5120, 5120, 17408, 8, 2, 2, 4},
      {"17408 x 5120 k 3 M 4 (rpg 2 rps 3 prefetch)", launch_unit_m4_17408, launch_perm_m4_17408, 17408, 5120, 4, 3, 2, 3},
      {"5120 x 17408 k 3 M 1 (rpg 2 rps 2 prefetch stream)", launch_unit_m1_5120, launch_perm_m1_5120, 5120, 17408, 1, 3, 2, 2},
  };
  printf("| kernel | plain us | permuted x us | permute launch us | permute + permuted us | bits |\n|---|---:|---:|---:|---:|---|\n");
  std::mt19937 rng(20261211);
  for (const Config& c : cs) {
    const size_t words = (size_t)c.rows * c.cols * c.k / 32, NC = std::max<size_t>(2, (256u << 20) / (words * 4) + 1);
    std::vector<uint32_t> hc(words * NC);
    for (auto& w : hc) w = rng();
    const size_t xn = (size_t)c.m * c.cols;
    std::vector<uint16_t> hx(xn);
    std::uniform_real_distribution<float> ux(-2.0f, 2.0f), us(1e-3f, 1e-2f);
    for (auto& v : hx) {
      float f = ux(rng);
      uint32_t b;
      memcpy(&b, &f, 4);
      v = (uint16_t)(b >> 16);
    }
    std::vector<float> hs(c.rows);
    for (auto& s : hs) s = us(rng);
    uint32_t* dc;
    uint16_t *dx, *dxp, *dy, *dyp;
    float* ds;
    CK(cudaMalloc(&dc, words * NC * 4));
    CK(cudaMalloc(&dx, xn * 2));
    CK(cudaMalloc(&dxp, xn * 2));
    CK(cudaMalloc(&ds, c.rows * 4));
    CK(cudaMalloc(&dy, (size_t)c.m * c.rows * 2));
    CK(cudaMalloc(&dyp, (size_t)c.m * c.rows * 2));
    CK(cudaMemcpy(dc, hc.data(), words * NC * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, hx.data(), xn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, hs.data(), c.rows * 4, cudaMemcpyHostToDevice));
    const unsigned chunks = (unsigned)(xn / 8);
    const dim3 g((c.rows + c.rpg * c.rps - 1) / (c.rpg * c.rps)), b(32 * c.rpg), pg((chunks + 255) / 256), pb(256);
    auto permute = [&] { permute_x<<<pg, pb>>>((const uint4*)dx, (uint4*)dxp, chunks); };
    permute();
    c.unit(g, b, dx, dc, ds, dy);
    c.perm(g, b, dxp, dc, ds, dyp);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> y(c.m * c.rows), yp(c.m * c.rows);
    CK(cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yp.data(), dyp, yp.size() * 2, cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (size_t i = 0; i < y.size(); ++i) differ += y[i] != yp[i];
    // Rounds of 20 launches each, kernels interleaved; per-launch times.
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t[4];
    for (int round = 0; round < 15; ++round)
      for (int which = 0; which < 4; ++which) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 20; ++i) {
          const uint32_t* codes = dc + (size_t)((round * 20 + i) % NC) * words;
          if (which == 0) c.unit(g, b, dx, codes, ds, dy);
          if (which == 1) c.perm(g, b, dxp, codes, ds, dyp);
          if (which == 2) permute();
          if (which == 3) { permute(); c.perm(g, b, dxp, codes, ds, dyp); }
        }
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[which].push_back(ms * 1000.0f / 20.0f);
      }
    auto med = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      char s[64];
      snprintf(s, sizeof s, "%.2f [%.2f-%.2f]", v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10]);
      return std::string(s);
    };
    printf("| %s | %s | %s | %s | %s | %s |\n", c.name, med(t[0]).c_str(), med(t[1]).c_str(), med(t[2]).c_str(),
           med(t[3]).c_str(), differ ? "DIFFER" : "identical");
    fflush(stdout);
    cudaFree(dc); cudaFree(dx); cudaFree(dxp); cudaFree(ds); cudaFree(dy); cudaFree(dyp);
  }
  return 0;
}
