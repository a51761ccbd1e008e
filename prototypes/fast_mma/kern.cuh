// Fast-tier reduce prototype on tensor cores (mma.sync m16n8k16, f16 operands, f32 accumulate).
// Weights in A (16 rows x 16 k-slots), samples in B's 8 columns.
// Lane (g,t) of a warp decodes a contiguous run of 32 weights of row g and of row g+8 per step
// (one step = 16 rows x 128 columns per warp); x is staged per block in shared memory, already
// permuted into B-fragment order and converted to f16 (3inst/mcg: duplicated for the two halves).
#pragma once
#ifndef __CUDACC_RTC__
#include <cstdint>
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define TB 256

struct Args {
  const uint32_t* codes; const float* scales; const uint16_t* x; uint16_t* y;
  float* ws; unsigned* cnt;  // split-K fixup (KS > 1)
  int R, C, M;
  uint32_t mask, xorv;  // 3inst constants as arguments (one LOP3)
};

template <int K, int L>
__device__ __forceinline__ uint32_t state_of(const uint32_t* w, int j) {
  const int off = (31 - j) * K;
  const int wi = off >> 5, sh = off & 31;
  uint32_t v;
  if (sh == 0) v = w[wi];
  else if (sh + L <= 32) v = w[wi] >> sh;
  else v = __funnelshift_r(w[wi], w[wi + 1], sh);
  return (sh + L == 32) ? v : (v & ((1u << L) - 1u));
}

__device__ __forceinline__ void mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t ldcs(const uint32_t* p) { uint32_t v; asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(v) : "l"(p)); return v; }

template <int CODE>
__device__ __forceinline__ uint32_t lcg(uint32_t s) {
  if (CODE == 0) return s * 34038481u + 76625530u;
  if (CODE == 1) return s * 89226354u + 64248484u;
  return s * 0xCBAC1FEDu;
}
__device__ __forceinline__ uint32_t onemad_pair(uint32_t xa, uint32_t xb) {
  const uint32_t da = __dp4a(xa, 0x01010101u, 0x6400u), db = __dp4a(xb, 0x01010101u, 0x6400u);
  uint32_t p = __byte_perm(da, db, 0x5410);
  __half2 h = __hsub2(*reinterpret_cast<__half2*>(&p), __halves2half2(__ushort_as_half(0x65FE), __ushort_as_half(0x65FE)));
  return *reinterpret_cast<uint32_t*>(&h);
}

// codes words of the run at column c of row `row`: K words + 1 history word (wraps in the block)
template <int K>
__device__ __forceinline__ void load_run(uint32_t* w, const uint32_t* row_codes, int c) {
  const int blk = c / TB, t0 = c % TB;
  const uint32_t* b = row_codes + blk * (TB * K / 32);
  const int w0 = (TB - 32 - t0) * K / 32;
#pragma unroll
  for (int i = 0; i <= K; ++i) {
    int wi = w0 + i; if (wi >= TB * K / 32) wi -= TB * K / 32;
    w[i] = ldcs(b + wi);
  }
}

template <int CODE, int K, int L, int NB, int RT, int CS, int Q, int D, int KS>
__global__ void __launch_bounds__(32 * RT * CS) fast_reduce(Args a) {
  constexpr int NW = RT * CS;
  constexpr int J = (CODE == 0 || CODE == 3) ? 8 : 16;    // mmas per step per warp
  constexpr int QW = Q / CS;                               // steps per warp per chunk (contiguous)
  static_assert(QW % D == 0, "ring");
  extern __shared__ __align__(16) uint2 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rt = warp / CS, cs = warp % CS;
  const int g = lane >> 2, t = lane & 3;
  const int R = a.R, C = a.C, M = a.M;
  // samples per 8-group actually stored: lanes of absent samples read sample 0's copy (broadcast)
  const int MP = NB == 2 ? 8 : (M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8);
  const int UPS = J * NB * MP * 4;                         // 8-byte units per step
  uint2* xs = smem;                                        // [2][Q * UPS]
  const int tile_row0 = (blockIdx.x * RT + rt) * 16;
  const int S = C / 128 / KS;                              // steps of this block
  const int step0 = blockIdx.y * S;
  const int NC = (S + Q - 1) / Q;
  const int rA = min(tile_row0 + g, R - 1), rB = min(tile_row0 + g + 8, R - 1);
  const size_t wpr = (size_t)(C / TB) * (TB * K / 32);
  const uint32_t* codeA = a.codes + (size_t)rA * wpr;
  const uint32_t* codeB = a.codes + (size_t)rB * wpr;
  const int lds_lane = (((NB == 2 ? 0 : 0) * MP + min(g, MP - 1)) * 4 + t);

  auto stage = [&](int chunk) {
    uint2* dst = xs + (chunk & 1) * (Q * UPS);
    const int cbase = (step0 + chunk * Q) * 128;
    const int nq = min(Q, S - chunk * Q);
    for (int n = 0; n < M; ++n) {
      const uint16_t* xr = a.x + (size_t)n * C + cbase;
      const int nb = n >> 3, n8 = n & 7;
      if (CODE == 0 || CODE == 3) {
        for (int u = threadIdx.x; u < nq * 32; u += 32 * NW) {
          const int q = u >> 5, tt = (u >> 3) & 3, j = u & 7;
          const uint2 raw = *reinterpret_cast<const uint2*>(xr + 4 * u);
          __half2 h0 = __floats2half2_rn(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xFFFF0000u));
          __half2 h1 = __floats2half2_rn(__uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xFFFF0000u));
          dst[(((q * J + j) * NB + nb) * MP + n8) * 4 + tt] = make_uint2(*reinterpret_cast<uint32_t*>(&h0), *reinterpret_cast<uint32_t*>(&h1));
        }
      } else {
        for (int u = threadIdx.x; u < nq * 64; u += 32 * NW) {
          const int q = u >> 6, tt = (u >> 4) & 3, j = u & 15;
          const uint32_t raw = *reinterpret_cast<const uint32_t*>(xr + 2 * u);
          const float f0 = __uint_as_float(raw << 16), f1 = __uint_as_float(raw & 0xFFFF0000u);
          __half2 h0 = __floats2half2_rn(f0, f0), h1 = __floats2half2_rn(f1, f1);
          dst[(((q * J + j) * NB + nb) * MP + n8) * 4 + tt] = make_uint2(*reinterpret_cast<uint32_t*>(&h0), *reinterpret_cast<uint32_t*>(&h1));
        }
      }
    }
  };

  float acc[NB][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) { acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f; }
  uint32_t wr[D][2][K + 1];
  // iteration i of this warp: chunk i / QW, local step cs * QW + i % QW (valid when inside the chunk)
  auto local_of = [&](int i) { const int c = i / QW, l = cs * QW + i % QW; return l < min(Q, S - c * Q) ? l : -1; };
  auto col_of = [&](int i) { return (step0 + (i / QW) * Q + cs * QW + i % QW) * 128 + t * 32; };
  const int NI = NC * QW;
#pragma unroll
  for (int d = 0; d < D; ++d) if (local_of(d) >= 0) { load_run<K>(wr[d][0], codeA, col_of(d)); load_run<K>(wr[d][1], codeB, col_of(d)); }
  stage(0);
  __syncthreads();
  for (int chunk = 0; chunk < NC; ++chunk) {
    if (chunk + 1 < NC) stage(chunk + 1);
    const uint2* xb = xs + (chunk & 1) * (Q * UPS);
    for (int i0 = chunk * QW; i0 < (chunk + 1) * QW; i0 += D) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        const int i = i0 + d;
        const int q = local_of(i);
        if (q >= 0) {
          const uint2* xq = xb + q * UPS + lds_lane;
          const uint32_t* wa = wr[d][0];
          const uint32_t* wb = wr[d][1];
          if (CODE == 0) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const uint32_t a0 = onemad_pair(lcg<0>(state_of<K, L>(wa, 4 * j)), lcg<0>(state_of<K, L>(wa, 4 * j + 1)));
              const uint32_t a1 = onemad_pair(lcg<0>(state_of<K, L>(wb, 4 * j)), lcg<0>(state_of<K, L>(wb, 4 * j + 1)));
              const uint32_t a2 = onemad_pair(lcg<0>(state_of<K, L>(wa, 4 * j + 2)), lcg<0>(state_of<K, L>(wa, 4 * j + 3)));
              const uint32_t a3 = onemad_pair(lcg<0>(state_of<K, L>(wb, 4 * j + 2)), lcg<0>(state_of<K, L>(wb, 4 * j + 3)));
#pragma unroll
              for (int nb = 0; nb < NB; ++nb) { const uint2 b = xq[(j * NB + nb) * MP * 4]; mma16816(acc[nb], a0, a1, a2, a3, b.x, b.y); }
            }
          } else if (CODE == 3) {  // raw words, no decode: the data path alone
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const uint32_t a0 = wa[j % (K + 1)] & 0x3bff3bffu, a1 = wb[j % (K + 1)] & 0x3bff3bffu;
#pragma unroll
              for (int nb = 0; nb < NB; ++nb) { const uint2 b = xq[(j * NB + nb) * MP * 4]; mma16816(acc[nb], a0, a1, a1, a0, b.x, b.y); }
            }
          } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const uint32_t a0 = (lcg<CODE>(state_of<K, L>(wa, 2 * j)) & a.mask) ^ a.xorv;
              const uint32_t a1 = (lcg<CODE>(state_of<K, L>(wb, 2 * j)) & a.mask) ^ a.xorv;
              const uint32_t a2 = (lcg<CODE>(state_of<K, L>(wa, 2 * j + 1)) & a.mask) ^ a.xorv;
              const uint32_t a3 = (lcg<CODE>(state_of<K, L>(wb, 2 * j + 1)) & a.mask) ^ a.xorv;
#pragma unroll
              for (int nb = 0; nb < NB; ++nb) { const uint2 b = xq[(j * NB + nb) * MP * 4]; mma16816(acc[nb], a0, a1, a2, a3, b.x, b.y); }
            }
          }
        }
        if (i + D < NI && local_of(i + D) >= 0) { load_run<K>(wr[d][0], codeA, col_of(i + D)); load_run<K>(wr[d][1], codeB, col_of(i + D)); }
      }
    }
    __syncthreads();
  }
  // reduce the CS column splits in shared memory (reuses the x buffers: all warps are past the last barrier)
  float* red = reinterpret_cast<float*>(smem);
  if (CS > 1) {
    if (cs > 0) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[(((rt * CS + cs) * NB + nb) * 4 + e) * 32 + lane] = acc[nb][e];
    }
    __syncthreads();
    if (cs == 0) {
      for (int c2 = 1; c2 < CS; ++c2)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nb][e] += red[(((rt * CS + c2) * NB + nb) * 4 + e) * 32 + lane];
    }
  }
  if (cs != 0) return;
  const int r0 = tile_row0 + g, r1 = tile_row0 + g + 8;
  float f0 = r0 < R ? a.scales[r0] : 0.f, f1 = r1 < R ? a.scales[r1] : 0.f;
  if (CODE == 0) { f0 = f0 / 147.800537109375f; f1 = f1 / 147.800537109375f; }
  if (KS == 1) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = nb * 8 + 2 * t + (e & 1), r = (e < 2) ? r0 : r1;
        if (n < M && r < R) { __nv_bfloat16 v = __float2bfloat16_rn(acc[nb][e] * ((e < 2) ? f0 : f1)); a.y[(size_t)n * R + r] = *reinterpret_cast<uint16_t*>(&v); }
      }
  } else {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = nb * 8 + 2 * t + (e & 1), r = (e < 2) ? r0 : r1;
        if (n < M && r < R) atomicAdd(a.ws + (size_t)n * R + r, acc[nb][e]);
      }
    __threadfence();
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(a.cnt + blockIdx.x * RT + rt, 1u) == KS - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (last) {
      __threadfence();
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = nb * 8 + 2 * t + (e & 1), r = (e < 2) ? r0 : r1;
          if (n < M && r < R) {
            float* p = a.ws + (size_t)n * R + r;
            const float s = __ldcg(p); *p = 0.f;
            __nv_bfloat16 v = __float2bfloat16_rn(s * ((e < 2) ? f0 : f1)); a.y[(size_t)n * R + r] = *reinterpret_cast<uint16_t*>(&v);
          }
        }
      if (lane == 0) a.cnt[blockIdx.x * RT + rt] = 0;
    }
  }
}

#ifndef __CUDACC_RTC__
struct Cfg { int rt, cs, q, d, ks; };
typedef cudaError_t (*LaunchFn)(const Args&, cudaStream_t);
// smem bytes of a config
inline size_t smem_bytes(int code, int nb, int rt, int cs, int q, int m) {
  const int J = (code == 0 || code == 3) ? 8 : 16;
  const int mp = nb == 2 ? 8 : (m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8);
  size_t x = 2ull * q * J * nb * mp * 4 * 8;
  size_t red = (size_t)rt * cs * nb * 4 * 32 * 4;
  return x > red ? x : red;
}
template <int CODE, int K, int L, int NB, int RT, int CS, int Q, int D, int KS>
cudaError_t launch_fast(const Args& a, cudaStream_t st) {
  auto f = fast_reduce<CODE, K, L, NB, RT, CS, Q, D, KS>;
  const size_t sm = smem_bytes(CODE, NB, RT, CS, Q, a.M);
  static size_t set = 0;
  if (sm > set) { cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm); if (e) return e; set = sm; }
  dim3 grid((a.R + 16 * RT - 1) / (16 * RT), KS);
  f<<<grid, 32 * RT * CS, sm, st>>>(a);
  return cudaGetLastError();
}
struct Entry { int code, k, l, nb; Cfg cfg; LaunchFn fn; const char* name; };
void register_entry(const Entry& e);
#endif
