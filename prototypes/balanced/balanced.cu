// Timing harness for `balanced_kernels.cu` (nvcc on the device; `run.sh`): the ninth
// session's balanced sets and the tenth's graded ones against the table's winner. Random code
// words, x and row scales at 17408 x 5120; every kernel's y must equal the unit's (the
// table's winner) bit for bit, then each is timed over 10 copies of the code words (334
// MB; L2 is 60 MB): 15 rounds, each kernel 20 launches per round, rounds interleaved so
// drift hits every kernel alike; median, p10 and p90 of the per-launch times.
#define ulong trellis_ulong  // the shim's 64-bit typedef; glibc's sys/types.h has its own
#include "balanced_kernels.cu"
#undef ulong
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

typedef void (*Balanced)(uint, const bf16_t*, const uint32_t*, const float*, bf16_t*);

struct Config {
  const char* name;
  Balanced f;  // null: the unit (2902 groups of 2 warps: the table's `rpg=2 rps=3`)
  uint W;      // the kernel's first argument: warps (balanced, solo) or 2-row sets (graded)
  uint groups, threads;
};

int main() {
  const uint R = 17408, WPR = 480, NC = 10;
  const size_t words = (size_t)R * WPR;
  std::mt19937 rng(20261201);
  std::vector<uint32_t> hc(words * NC);
  for (auto& w : hc) w = rng();
  std::vector<uint16_t> hx(5120);
  std::uniform_real_distribution<float> ux(-2.0f, 2.0f), us(1e-3f, 1e-2f);
  for (auto& v : hx) {
    float f = ux(rng);
    uint32_t b;
    memcpy(&b, &f, 4);
    v = (uint16_t)(b >> 16);
  }
  std::vector<float> hs(R);
  for (auto& s : hs) s = us(rng);
  uint32_t* dc;
  bf16_t *dx, *dy, *dref;
  float* ds;
  CK(cudaMalloc(&dc, words * NC * 4));
  CK(cudaMalloc(&dx, 5120 * 2));
  CK(cudaMalloc(&ds, R * 4));
  CK(cudaMalloc(&dy, R * 2));
  CK(cudaMalloc(&dref, R * 2));
  CK(cudaMemcpy(dc, hc.data(), words * NC * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, hx.data(), 5120 * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ds, hs.data(), R * 4, cudaMemcpyHostToDevice));

  std::vector<Config> cs = {{"unit rpg2 rps3 (table winner)", nullptr, 5803, 2902, 64}};
  cs.push_back({"solo3 (unit, simdgroup id 0)", reduce_solo3, 5803, 5803, 32});
  cs.push_back({"solo4", reduce_solo4, 4352, 4352, 32});
  const uint Ws[] = {4352, 5016, 5802};
  for (uint W : Ws) cs.push_back({"balanced4", reduce_balanced4, W, W, 32});
  // Graded: G2 2-row sets (G2 = 1 mod 3: about 0, 1, 2, 3 per scheduler), last or first.
  const uint G2s[] = {1, 529, 1057, 1585};
  for (uint G2 : G2s) cs.push_back({"graded_last", reduce_graded_last, G2, ((17408 - 2 * G2) / 3 + G2 + 1) / 2, 64});
  for (uint G2 : G2s) cs.push_back({"graded_first", reduce_graded_first, G2, ((17408 - 2 * G2) / 3 + G2 + 1) / 2, 64});

  auto launch = [&](const Config& c, const uint32_t* codes, bf16_t* y) {
    if (!c.f)
      UNIT_KERNEL<<<c.groups, c.threads>>>(dx, codes, ds, nullptr, y);
    else {
      uint W = c.W;
      const bf16_t* xp = dx;
      const float* sp = ds;
      void* args[] = {&W, &xp, &codes, &sp, &y};
      cudaLaunchKernel((const void*)c.f, dim3(c.groups), dim3(c.threads), args, 0, 0);
    }
  };
  // The reference output, then every kernel's bits against it.
  launch(cs[0], dc, dref);
  CK(cudaDeviceSynchronize());
  std::vector<uint16_t> want(R), got(R);
  CK(cudaMemcpy(want.data(), dref, R * 2, cudaMemcpyDeviceToHost));
  for (auto& c : cs) {
    CK(cudaMemset(dy, 0xff, R * 2));
    launch(c, dc, dy);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy, R * 2, cudaMemcpyDeviceToHost));
    uint bad = 0;
    for (uint r = 0; r < R; ++r) bad += got[r] != want[r];
    cudaFuncAttributes a;
    const void* fp = c.f ? (const void*)c.f : (const void*)UNIT_KERNEL;
    CK(cudaFuncGetAttributes(&a, fp));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp, c.threads, 0));
    per_sm *= c.threads / 32;
    printf("%-26s W %4u  regs %2d  local %3zu B  warps/SM %2d  rows differing %u\n", c.name, c.W, a.numRegs,
           a.localSizeBytes, per_sm, bad);
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreateWithFlags(&e0, cudaEventDefault));
  CK(cudaEventCreateWithFlags(&e1, cudaEventDefault));
  for (int i = 0; i < 50; ++i) launch(cs[0], dc + (i % NC) * words, dy);  // warm-up
  std::vector<std::vector<float>> t(cs.size());
  uint rot = 0;
  for (int round = 0; round < 15; ++round) {
    for (size_t i = 0; i < cs.size(); ++i) {
      CK(cudaEventRecord(e0));
      for (int n = 0; n < 20; ++n) launch(cs[i], dc + (rot++ % NC) * words, dy);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t[i].push_back(ms * 1000.0f / 20.0f);
    }
  }
  printf("\n| kernel | W | median us | p10-p90 us |\n|---|---:|---:|---|\n");
  for (size_t i = 0; i < cs.size(); ++i) {
    auto v = t[i];
    std::sort(v.begin(), v.end());
    printf("| %s | %u | %.2f | %.2f-%.2f |\n", cs[i].name, cs[i].W, v[v.size() / 2], v[1], v[v.size() - 2]);
  }
  return 0;
}
