// x as f32 in the lane-interleaved layout (prototypes/xf32/README.md): each table winner
// (u_*_p.cu) against its twins reading x lane-interleaved per 1024-column slice as bf16
// (u_*_i.cu, as Variant::interleaved_x ships) and as f32 (u_*_f.cu: no conversion in the
// loop), bit for bit, then timed. Random code words (copies totalling >= 256 MB: L2 is
// 60 MB), x and row scales; 15 interleaved rounds of 20 launches per kernel, the median,
// p10 and p90 of the per-launch times.
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
#define C(name, ...)                                                                            \
  extern "C" void launch_##name##_p(dim3, dim3, const void*, const void*, const void*, void*); \
  extern "C" void launch_##name##_i(dim3, dim3, const void*, const void*, const void*, void*); \
  extern "C" void launch_##name##_f(dim3, dim3, const void*, const void*, const void*, void*);
#include "units.h"
#undef C

struct Config {
  const char* name;
  Launch p, i, f;
  unsigned rows, cols, k, m, rpg, rps;
};

int main() {
  std::vector<Config> cs = {
#define C(name, rows, cols, k, m, rpg, rps) {#name, launch_##name##_p, launch_##name##_i, launch_##name##_f, rows, cols, k, m, rpg, rps},
#include "units.h"
#undef C
  };
  printf("| unit | shape | M | rpg x rps | winner's x us | bf16 interleaved us | f32 interleaved us | f32 / winner | bits |\n|---|---|---:|---|---:|---:|---:|---:|---|\n");
  std::mt19937 rng(20261202);
  for (const Config& c : cs) {
    const size_t words = (size_t)c.rows * c.cols * c.k / 32, NC = std::max<size_t>(2, (256u << 20) / (words * 4) + 1);
    std::vector<uint32_t> hc(words * NC);
    for (auto& w : hc) w = rng();
    const size_t xn = (size_t)c.m * c.cols;
    std::vector<uint16_t> hx(xn), hxi(xn);
    std::vector<float> hxf(xn);
    std::normal_distribution<float> nx(0.0f, 1.0f);
    std::uniform_real_distribution<float> us(1e-3f, 1e-2f);
    for (auto& v : hx) {
      float f = nx(rng);
      uint32_t b;
      memcpy(&b, &f, 4);
      v = (uint16_t)(b >> 16);
    }
    // Lane l's chunk q of its run (16 bytes: 8 bf16 or 4 f32) goes to chunk 32 q + l of
    // its 1024-column slice; x rows are cols apart (cols a multiple of 1024).
    for (size_t s = 0; s < xn / 1024; ++s)
      for (unsigned l = 0; l < 32; ++l)
        for (unsigned j = 0; j < 32; ++j) {
          const size_t src = s * 1024 + l * 32 + j;
          hxi[s * 1024 + (32 * (j / 8) + l) * 8 + j % 8] = hx[src];
          const uint32_t b = (uint32_t)hx[src] << 16;
          float f;
          memcpy(&f, &b, 4);
          hxf[s * 1024 + (32 * (j / 4) + l) * 4 + j % 4] = f;
        }
    std::vector<float> hs(c.rows);
    for (auto& s : hs) s = us(rng);
    uint32_t* dc;
    uint16_t *dx, *dxi, *dy[3];
    float *dxf, *ds;
    CK(cudaMalloc(&dc, words * NC * 4));
    CK(cudaMalloc(&dx, xn * 2));
    CK(cudaMalloc(&dxi, xn * 2));
    CK(cudaMalloc(&dxf, xn * 4));
    CK(cudaMalloc(&ds, c.rows * 4));
    for (auto& d : dy) CK(cudaMalloc(&d, (size_t)c.m * c.rows * 2));
    CK(cudaMemcpy(dc, hc.data(), words * NC * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, hx.data(), xn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dxi, hxi.data(), xn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dxf, hxf.data(), xn * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, hs.data(), c.rows * 4, cudaMemcpyHostToDevice));
    const dim3 g((c.rows + c.rpg * c.rps - 1) / (c.rpg * c.rps), c.m == 1 ? 1 : 1), b(32 * c.rpg);
    const void* xs[3] = {dx, dxi, dxf};
    Launch ls[3] = {c.p, c.i, c.f};
    for (int w = 0; w < 3; ++w) ls[w](g, b, xs[w], dc, ds, dy[w]);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> y[3];
    size_t differ = 0;
    for (int w = 0; w < 3; ++w) {
      y[w].resize((size_t)c.m * c.rows);
      CK(cudaMemcpy(y[w].data(), dy[w], y[w].size() * 2, cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < y[0].size(); ++i) differ += (y[0][i] != y[1][i]) + (y[0][i] != y[2][i]);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t[3];
    for (int round = 0; round < 15; ++round)
      for (int w = 0; w < 3; ++w) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 20; ++i) ls[w](g, b, xs[w], dc + (size_t)((round * 20 + i) % NC) * words, ds, dy[w]);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[w].push_back(ms * 1000.0f / 20.0f);
      }
    auto med = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      char s[64];
      snprintf(s, sizeof s, "%.2f [%.2f-%.2f]", v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10]);
      return std::string(s);
    };
    auto median = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    printf("| %s | %ux%u k%u | %u | %u x %u | %s | %s | %s | %.3f | %s |\n", c.name, c.rows, c.cols, c.k, c.m, c.rpg, c.rps,
           med(t[0]).c_str(), med(t[1]).c_str(), med(t[2]).c_str(), median(t[2]) / median(t[0]),
           differ ? "DIFFER" : "identical");
    fflush(stdout);
    cudaFree(dc); cudaFree(dx); cudaFree(dxi); cudaFree(dxf); cudaFree(ds);
    for (auto& d : dy) cudaFree(d);
  }
  return 0;
}
