// Fifty-sixth session: the fast tier's prescale kernel (bf16 activations -> f16 x) in the
// stream, against designs that keep the sample in registers and reduce with warp
// shuffles. `prescale_base.cuh` is the shipped template rendered by `xtask render
// --quick` (bf16 -> f16, cols made a template parameter). Each design is checked bit
// for bit against the shipped kernel (xs, unscale, flags) before it is timed.
// Build: nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o prescale_bench
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
// glibc's sys/types.h has its own `ulong` (unsigned long); the shim's is renamed.
#define ulong shim_ulong
#include "prescale_base.cuh"
// The template as this session renders it (`prescale_v2.cuh`, made the same way).
#include "prescale_v2.cuh"
// The template as this session ships it (`prescale_v3.cuh`: the group's thread count at
// compile time).
#define PRESCALE_THREADS 512u
#define FIRSTS (PRESCALE_THREADS < 32u ? PRESCALE_THREADS : 32u)
#include "prescale_v3.cuh"

// One pass: every value of the sample loaded at once into registers (NV a thread,
// vectors of 2 where V2), the largest by warp shuffles and one barrier, the tiny flag
// by __syncthreads_or.
template <uint COLS, uint T>
__global__ void __launch_bounds__(T) prescale_regs(const bf16_t* __restrict__ x, const float* __restrict__ powers,
                                                   f16_t* __restrict__ xs, float* __restrict__ unscale,
                                                   uint32_t* __restrict__ flags) {
  constexpr uint PAIRS = COLS / 2u;  // COLS even
  constexpr uint NV = (PAIRS + T - 1u) / T;
  __shared__ float wmax[T / 32u];
  const ulong row = (ulong)blockIdx.x * COLS;
  const uint* xp = reinterpret_cast<const uint*>(x + row);
  uint* yp = reinterpret_cast<uint*>(xs + row);
  uint w[NV];
  UNROLL for (uint j = 0u; j < NV; ++j) {
    const uint c = threadIdx.x + j * T;
    w[j] = c < PAIRS ? xp[c] : 0u;
  }
  float mx = 0.0f;
  UNROLL for (uint j = 0u; j < NV; ++j) {
    const float lo = __uint_as_float(w[j] << 16), hi = __uint_as_float(w[j] & 0xFFFF0000u);
    mx = fmax(mx, fmax(fmax(lo, -lo), fmax(hi, -hi)));
  }
  UNROLL for (uint o = 16u; o > 0u; o /= 2u) mx = fmax(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  if ((threadIdx.x & 31u) == 0u) wmax[threadIdx.x >> 5] = mx;
  __syncthreads();
  UNROLL for (uint i = 0u; i < T / 32u; ++i) mx = fmax(mx, wmax[i]);
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? floor_log2(mx) : 13;
  const int e = top - 13 < -126 ? -126 : top - 13;
  const float floor_tiny = mul32(mx, as_f32(0x31800000u));
  uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
  const float down = as_f32((uint)(127 - e) << 23);
  UNROLL for (uint j = 0u; j < NV; ++j) {
    const uint c = threadIdx.x + j * T;
    const float lo = __uint_as_float(w[j] << 16), hi = __uint_as_float(w[j] & 0xFFFF0000u);
    if (lo != 0.0f && fmax(lo, -lo) < floor_tiny) tiny = 1u;
    if (hi != 0.0f && fmax(hi, -hi) < floor_tiny) tiny = 1u;
    const uint a = f32_to_half_bits(mul32(lo, down)), b = f32_to_half_bits(mul32(hi, down));
    if (c < PAIRS) yp[c] = a | (b << 16);
  }
  tiny = __syncthreads_or(tiny);
  if (threadIdx.x == 0u) {
    flags[blockIdx.x] = tiny;
    unscale[blockIdx.x] = as_f32((uint)(e + 127) << 23);
    if (blockIdx.x == 0u) {
      for (uint p = 0u; p < 2u; ++p) unscale[gridDim.x + p] = powers[p];
    }
  }
}

// The same in the template's vocabulary alone (no shuffles, no vector loads): one load
// pass into registers, each reduction in two levels through shared memory (a thread of
// the first 32 folds a strided 16, then every thread folds those 32): 4 barriers, not 18.
template <uint COLS, uint T>
__global__ void __launch_bounds__(T) prescale_neutral(const bf16_t* __restrict__ x, const float* __restrict__ powers,
                                                      f16_t* __restrict__ xs, float* __restrict__ unscale,
                                                      uint32_t* __restrict__ flags) {
  constexpr uint NV = (COLS + T - 1u) / T;
  __shared__ float part_max[T];
  __shared__ float part_max2[32];
  __shared__ uint part_tiny[T];
  __shared__ uint part_tiny2[32];
  const ulong row = (ulong)blockIdx.x * COLS;
  float v[NV];
  UNROLL for (uint j = 0u; j < NV; ++j) {
    const uint c = threadIdx.x + j * T;
    v[j] = c < COLS ? to_f32(x[row + c]) : 0.0f;
  }
  float mx = 0.0f;
  UNROLL for (uint j = 0u; j < NV; ++j) mx = fmax(mx, fmax(v[j], -v[j]));
  part_max[threadIdx.x] = mx;
  __syncthreads();
  if (threadIdx.x < 32u) {
    UNROLL for (uint i = 1u; i < T / 32u; ++i) mx = fmax(mx, part_max[threadIdx.x + 32u * i]);
    part_max2[threadIdx.x] = mx;
  }
  __syncthreads();
  mx = part_max2[0];
  UNROLL for (uint i = 1u; i < 32u; ++i) mx = fmax(mx, part_max2[i]);
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? floor_log2(mx) : 13;
  const int e = top - 13 < -126 ? -126 : top - 13;
  const float floor_tiny = mul32(mx, as_f32(0x31800000u));
  uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
  const float down = as_f32((uint)(127 - e) << 23);
  UNROLL for (uint j = 0u; j < NV; ++j) {
    const uint c = threadIdx.x + j * T;
    if (v[j] != 0.0f && fmax(v[j], -v[j]) < floor_tiny) tiny = 1u;
    if (c < COLS) xs[row + c] = from_f32<f16_t>(mul32(v[j], down));
  }
  part_tiny[threadIdx.x] = tiny;
  __syncthreads();
  if (threadIdx.x < 32u) {
    UNROLL for (uint i = 1u; i < T / 32u; ++i) tiny |= part_tiny[threadIdx.x + 32u * i];
    part_tiny2[threadIdx.x] = tiny;
  }
  __syncthreads();
  if (threadIdx.x == 0u) {
    UNROLL for (uint i = 1u; i < 32u; ++i) tiny |= part_tiny2[i];
    flags[blockIdx.x] = tiny;
    unscale[blockIdx.x] = as_f32((uint)(e + 127) << 23);
    if (blockIdx.x == 0u) {
      for (uint p = 0u; p < 2u; ++p) unscale[gridDim.x + p] = powers[p];
    }
  }
}

__global__ void empty_kernel() {}

// A stand-in for the matrix kernel behind the prescale: reads `n` words across the GPU
// (about 20 us for 80 MB), so a pair's launches are not bound by the host's launch rate
// and the pair's time less this kernel's is what the prescale adds to a stream.
__global__ void stream_kernel(const uint4* __restrict__ src, size_t n, uint* __restrict__ sink) {
  uint acc = 0u;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

struct Bufs {
  bf16_t* x; float* powers; f16_t* xs; float* unscale; uint32_t* flags;
};

template <typename K>
float time_us(K launch, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) launch();
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) launch();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms; CK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.0f / reps;
}

static uint4* g_stream = nullptr;
static uint* g_sink = nullptr;
static const size_t g_words = (80u << 20) / 16u;
static int g_sms = 132;

template <uint COLS>
void run(int m) {
  const size_t n = (size_t)m * COLS;
  std::vector<uint16_t> hx(n);
  srand(7 + m + COLS);
  for (size_t i = 0; i < n; ++i) {
    // bf16 bits: random sign and mantissa, exponents over a wide range, some tiny
    // values (flags) in sample 0 and zeros.
    uint exp = 100 + rand() % 40;
    if (i % 997 == 5 && i < COLS) exp = 60;
    uint16_t b = (uint16_t)(((rand() & 1) << 15) | (exp << 7) | (rand() & 127));
    if (i % 101 == 3) b = 0;
    hx[i] = b;
  }
  Bufs base, mine;
  for (Bufs* bf : {&base, &mine}) {
    CK(cudaMalloc(&bf->x, n * 2)); CK(cudaMalloc(&bf->xs, n * 2));
    CK(cudaMalloc(&bf->powers, 8)); CK(cudaMalloc(&bf->unscale, (m + 8) * 4));
    CK(cudaMalloc(&bf->flags, m * 4));
    CK(cudaMemcpy(bf->x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    float p[2] = {0.25f, 8.0f};
    CK(cudaMemcpy(bf->powers, p, 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(bf->unscale, 0, (m + 8) * 4));
  }
  auto lb = [&] { prescale_base<COLS><<<m, 512>>>(base.x, base.powers, base.xs, base.unscale, base.flags); };
  auto l256 = [&] { prescale_regs<COLS, 256><<<m, 256>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto l512 = [&] { prescale_regs<COLS, 512><<<m, 512>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto l1024 = [&] { prescale_regs<COLS, 1024><<<m, 1024>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto ln = [&] { prescale_neutral<COLS, 512><<<m, 512>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto ln1024 = [&] { prescale_neutral<COLS, 1024><<<m, 1024>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto lv2 = [&] { prescale_v2<COLS><<<m, 512>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto lv3 = [&] { prescale_v3<COLS><<<m, 512>>>(mine.x, mine.powers, mine.xs, mine.unscale, mine.flags); };
  auto le = [&] { empty_kernel<<<m, 512>>>(); };
  lb(); CK(cudaDeviceSynchronize());
  std::vector<uint16_t> rxs(n), mxs(n);
  std::vector<float> ru(m + 8), mu(m + 8);
  std::vector<uint32_t> rf(m), mf(m);
  CK(cudaMemcpy(rxs.data(), base.xs, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ru.data(), base.unscale, (m + 8) * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rf.data(), base.flags, m * 4, cudaMemcpyDeviceToHost));
  const char* names[7] = {"regs T=256", "regs T=512", "regs T=1024", "neutral T=512", "neutral T=1024", "template v2", "template v3"};
  int i = 0;
  for (auto l : {std::function<void()>(l256), std::function<void()>(l512), std::function<void()>(l1024),
                 std::function<void()>(ln), std::function<void()>(ln1024), std::function<void()>(lv2),
                 std::function<void()>(lv3)}) {
    CK(cudaMemset(mine.xs, 0xFF, n * 2)); CK(cudaMemset(mine.flags, 0xFF, m * 4));
    l(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(mxs.data(), mine.xs, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(mu.data(), mine.unscale, (m + 8) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(mf.data(), mine.flags, m * 4, cudaMemcpyDeviceToHost));
    bool same = mxs == rxs && memcmp(mu.data(), ru.data(), (m + 2) * 4) == 0 && mf == rf;
    int flagged = 0;
    for (int s = 0; s < m; ++s) flagged += rf[s] != 0;
    printf("cols %5u m %2d %-12s bits %s (flags raised %d)\n", COLS, m, names[i++], same ? "same" : "DIFFER", flagged);
  }
  // Each design before the stand-in kernel, against the stand-in alone.
  auto ls = [&] { stream_kernel<<<g_sms * 4, 512>>>(g_stream, g_words, g_sink); };
  const int preps = 300;
  const float ts = time_us(ls, preps);
  auto pair = [&](auto l) { return time_us([&] { l(); ls(); }, preps) - ts; };
  printf("cols %5u m %2d added to a %.1f us kernel, us: empty %.2f base %.2f regs512 %.2f neutral512 %.2f v2 %.2f v3 %.2f\n",
         COLS, m, ts, pair(le), pair(lb), pair(l512), pair(ln), pair(lv2), pair(lv3));
  const int reps = 2000;
  const float te = time_us(le, reps), tb = time_us(lb, reps), t256 = time_us(l256, reps), t512 = time_us(l512, reps),
              t1024 = time_us(l1024, reps), tn = time_us(ln, reps), tn1024 = time_us(ln1024, reps), tv2 = time_us(lv2, reps), tv3 = time_us(lv3, reps);
  printf("cols %5u m %2d in-stream us/launch: empty %.2f base %.2f regs256 %.2f regs512 %.2f regs1024 %.2f neutral512 %.2f neutral1024 %.2f v2 %.2f v3 %.2f\n",
         COLS, m, te, tb, t256, t512, t1024, tn, tn1024, tv2, tv3);
  for (Bufs* bf : {&base, &mine}) {
    cudaFree(bf->x); cudaFree(bf->xs); cudaFree(bf->powers); cudaFree(bf->unscale); cudaFree(bf->flags);
  }
}

int main() {
  CK(cudaMalloc(&g_stream, g_words * 16)); CK(cudaMemset(g_stream, 1, g_words * 16));
  CK(cudaMalloc(&g_sink, 4));
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  for (int m : {1, 4, 16}) {
    run<5120>(m);
    run<17408>(m);
    run<4096>(m);
    run<14336>(m);
  }
  return 0;
}
