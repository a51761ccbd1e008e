// Split-K prototype harness (see make_proto.py): times each rewritten reduce_mma unit at
// gridDim.z = S in {1, 2, ...} over rotating copies of random codes, and checks every S
// against S = 1 (same kernel, one slice).
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include "proto_gen.cu"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
typedef void (*Kern)(const bf16_t*, const uint32_t*, const f16_t*, const float*, float*);

static double bench(Kern k, int rows, int cs, int S, uint32_t* codes, size_t words, int copies,
                    const bf16_t* x, const f16_t* sc, const float* tab, float* y, std::vector<float>* out) {
  dim3 grid((rows + 15) / 16, 1, S), block(32 * cs);
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  if (out) {
    CK(cudaMemset(y, 0, rows * 4));
    k<<<grid, block>>>(x, codes, sc, tab, y); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    out->resize(rows); CK(cudaMemcpy(out->data(), y, rows * 4, cudaMemcpyDeviceToHost));
  }
  for (int i = 0; i < 20; ++i) k<<<grid, block>>>(x, codes + (size_t)(i % copies) * words, sc, tab, y);
  std::vector<double> t;
  for (int r = 0; r < 15; ++r) {
    const int n = 50;
    CK(cudaEventRecord(a));
    for (int i = 0; i < n; ++i) k<<<grid, block>>>(x, codes + (size_t)((i + r) % copies) * words, sc, tab, y);
    CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000.0 / n);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  struct Case { const char* name; Kern k; int rows, cols, cs; };
  Case cases[] = {{"17408x5120 cs8 x=shared", a8, 17408, 5120, 8}, {"17408x5120 cs4 x=shared", a4, 17408, 5120, 4},
                  {"5120x17408 cs16", b16, 5120, 17408, 16}, {"5120x17408 cs8", b8, 5120, 17408, 8}};
  for (auto& c : cases) {
    const size_t words = (size_t)c.rows * c.cols * 2 / 32 + 4096;  // k = 2, padded
    const int copies = (int)std::max<size_t>(4, (400u << 20) / (words * 4));
    std::vector<uint32_t> h(words * copies);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (auto& w : h) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w = (uint32_t)s; }
    std::vector<uint16_t> hx(c.cols), hs(c.rows, 0x3C00);  // x: bf16 in [-2, 2]; scale 1.0 (f16)
    for (auto& v : hx) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; float f = ((s >> 40) / 16777216.0f) * 4 - 2; uint32_t b; memcpy(&b, &f, 4); v = b >> 16; }
    uint32_t* codes; bf16_t* x; f16_t* sc; float *tab, *y;
    CK(cudaMalloc(&codes, h.size() * 4)); CK(cudaMalloc(&x, c.cols * 2)); CK(cudaMalloc(&sc, c.rows * 2));
    CK(cudaMalloc(&tab, 4)); CK(cudaMalloc(&y, c.rows * 4));
    CK(cudaMemcpy(codes, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), c.cols * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(sc, hs.data(), c.rows * 2, cudaMemcpyHostToDevice));
    std::vector<float> ref, got;
    for (int S : {1, 2, 3, 4, 5, 8}) {
      double us = bench(c.k, c.rows, c.cs, S, codes, words, copies, x, sc, tab, y, S == 1 ? &ref : &got);
      double worst = 0, mag = 0;
      if (S > 1) for (int r = 0; r < c.rows; ++r) { worst = std::max(worst, (double)fabsf(got[r] - ref[r])); mag = std::max(mag, (double)fabsf(ref[r])); }
      printf("%-26s S=%d  %7.2f us  (%.2f T weights/s)  max|diff vs S=1| %.3g of max|y| %.3g\n", c.name, S, us,
             (double)c.rows * c.cols / us * 1e-6, worst, mag);
    }
    CK(cudaFree(codes)); CK(cudaFree(x)); CK(cudaFree(sc)); CK(cudaFree(tab)); CK(cudaFree(y));
  }
  return 0;
}
