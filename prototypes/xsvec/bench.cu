// x staged once per group as f32 and read four values per LDS.128 (README.md): each
// table winner at 17408 x 5120 k 3 1mad L 12 (unit_m*_base.cu) against its twins
// (twin.py), bit for bit, then timed. Random code words (>= 256 MB: L2 is 60 MB), x and
// row scales; 15 interleaved rounds of 20 launches per kernel; median [p10-p90] per launch.
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
#define U(name, twin, m, rpg, rps) extern "C" void launch_##name(dim3, dim3, const void*, const void*, const void*, void*);
#include "units.h"
#undef U
struct Unit { const char* name; Launch f; int twin; unsigned m, rpg, rps; };
static const Unit units[] = {
#define U(name, twin, m, rpg, rps) {#name, launch_##name, twin, m, rpg, rps},
#include "units.h"
#undef U
};

int main() {
  const unsigned rows = 17408, cols = 5120, k = 3;
  const size_t words = (size_t)rows * cols * k / 32, NC = (256u << 20) / (words * 4) + 1;
  std::mt19937 rng(20261214);
  std::vector<uint32_t> hc(words * NC);
  for (auto& w : hc) w = rng();
  std::vector<uint16_t> hx(8 * cols);
  std::uniform_real_distribution<float> ux(-2.0f, 2.0f), us(1e-3f, 1e-2f);
  for (auto& v : hx) { float f = ux(rng); uint32_t b; memcpy(&b, &f, 4); v = (uint16_t)(b >> 16); }
  std::vector<float> hs(rows);
  for (auto& s : hs) s = us(rng);
  uint32_t* dc; uint16_t *dx, *dy; float* ds;
  CK(cudaMalloc(&dc, words * NC * 4));
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&ds, rows * 4));
  CK(cudaMalloc(&dy, 8 * rows * 2));
  CK(cudaMemcpy(dc, hc.data(), words * NC * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ds, hs.data(), rows * 4, cudaMemcpyHostToDevice));
  printf("| unit | M | rows per group x per simdgroup | us median [p10-p90] | vs the winner | bits |\n|---|---:|---|---:|---:|---|\n");
  const size_t n = sizeof units / sizeof units[0];
  for (size_t a = 0; a < n;) {
    size_t b = a + 1;
    while (b < n && units[b].twin) ++b;  // units[a] is the winner, a+1..b its twins
    const unsigned m = units[a].m;
    std::vector<std::vector<uint16_t>> ys;
    for (size_t i = a; i < b; ++i) {
      const Unit& u = units[i];
      const dim3 g((rows + u.rpg * u.rps - 1) / (u.rpg * u.rps)), bl(32 * u.rpg);
      CK(cudaMemset(dy, 0xff, 8 * rows * 2));
      u.f(g, bl, dx, dc, ds, dy);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      ys.emplace_back(m * rows);
      CK(cudaMemcpy(ys.back().data(), dy, m * rows * 2, cudaMemcpyDeviceToHost));
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<std::vector<float>> t(b - a);
    for (int round = 0; round < 15; ++round)
      for (size_t i = a; i < b; ++i) {
        const Unit& u = units[i];
        const dim3 g((rows + u.rpg * u.rps - 1) / (u.rpg * u.rps)), bl(32 * u.rpg);
        CK(cudaEventRecord(e0));
        for (int r = 0; r < 20; ++r) u.f(g, bl, dx, dc + (size_t)((round * 20 + r) % NC) * words, ds, dy);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[i - a].push_back(ms * 1000.0f / 20.0f);
      }
    float base = 0;
    for (size_t i = a; i < b; ++i) {
      std::vector<float> v = t[i - a];
      std::sort(v.begin(), v.end());
      const float med = v[v.size() / 2];
      if (i == a) base = med;
      size_t differ = 0;
      for (size_t j = 0; j < ys[0].size(); ++j) differ += ys[i - a][j] != ys[0][j];
      printf("| %s | %u | %u x %u | %.2f [%.2f-%.2f] | %.3f | %s |\n", units[i].name, m, units[i].rpg, units[i].rps, med,
             v[v.size() / 10], v[v.size() * 9 / 10], med / base, i == a ? "reference" : differ ? "DIFFER" : "identical");
    }
    fflush(stdout);
    a = b;
  }
  return 0;
}
