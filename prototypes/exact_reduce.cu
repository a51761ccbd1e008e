// Prototypes of the SPEC 5 canonical order (exact tier) for trellis reduce on the H200,
// timed in one run against the seed's structure and dense bf16 cuBLAS, and checked bit
// for bit against a host implementation of SPEC 2-5 (issue 10).
//
// Build: nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -DKSEL=3 -DMSEL=1 -c exact_reduce.cu ...
// (see run.sh: one object per k, compiled in parallel, plus the driver with -DDRIVER).
//
// Geometry: T = 256, L = 12, code 1mad, bf16 activations and outputs, f16 scales.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <string>

typedef unsigned int uint;
constexpr int TB = 256, LB = 12;
constexpr uint MAD_MUL = 34038481u, MAD_ADD = 76625530u;
constexpr uint R_HI = 0x3bddb447u, R_LO = 0xaf7486beu;

struct Args {
  const uint4* x;        // bf16 [M][cols] as 16-byte vectors
  const uint* codes;     // [rows][cols/T][T*k/32]
  const __half* scales;  // [rows]
  const float* table;    // 2^L values (seed)
  unsigned short* y;     // bf16 [M][rows]
  int rows, cols;
};

// ---------------------------------------------------------------- device helpers
__device__ __forceinline__ uint dp4a_acc(uint x, uint c) {
  uint r;
  asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(0x01010101u), "r"(c));
  return r;
}
// bf16(v) as an f32, one F2FP: the packed convert puts bf16(v) in the high half, 0 below.
__device__ __forceinline__ float bf16r_pack(float v) {
  uint b;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b) : "f"(v), "f"(0.0f));
  return __uint_as_float(b);
}
// bf16(v) as an f32 through the single convert (F2F.BF16.F32, 16/clk/SM) and a shift.
__device__ __forceinline__ float bf16r_single(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return __uint_as_float((uint)h << 16);
}
// 1mad, new: dp4a on the base 1.5*2^23 - 510, one FADD, then y * (r_hi + r_lo).
__device__ __forceinline__ float onemad_new(uint s) {
  const float y = __fadd_rn(__uint_as_float(dp4a_acc(s * MAD_MUL + MAD_ADD, 0x4B400000u - 510u)), -12582912.0f);
  return __fmaf_rn(y, __uint_as_float(R_HI), __fmul_rn(y, __uint_as_float(R_LO)));
}
// 1mad, as the templates had it: reciprocal, then one fma correction step.
__device__ __forceinline__ float onemad_old(uint s) {
  const float a = __fadd_rn(__uint_as_float(dp4a_acc(s * MAD_MUL + MAD_ADD, 0x4B000000u)), -8389118.0f);
  const float d = 147.800537109375f, r = __uint_as_float(R_HI);
  const float q = __fmul_rn(a, r);
  return __fmaf_rn(__fmaf_rn(-q, d, a), r, q);
}
template <int K>
__device__ __forceinline__ uint state_of(const uint* w, int j) {
  const int b = (31 - j) * K, wi = b >> 5, off = b & 31;
  uint v;
  if (off + LB > 32) v = __funnelshift_r(w[wi], w[wi + 1], off);
  else v = w[wi] >> off;
  return v & ((1u << LB) - 1u);
}
__device__ __forceinline__ float butterfly(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ uint xword(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ unsigned short f2bf(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

// DEC: 0 = new inline 1mad + packed round, 1 = shared table + single round (the seed),
// 2 = old inline 1mad + single round (the templates before this issue).
// R rows per warp: lane l holds lane l of R rows, so one x load serves R rows.
// WIDE: code words as one 8- or 16-byte vector where the run's words are aligned (k 2, 4).
template <int K, int M, int R, int WIDE, int DEC>
__global__ void __launch_bounds__(256) reduce_proto(Args a) {
  __shared__ float tbl[DEC == 1 ? (1 << LB) : 1];
  if (DEC == 1) {
    for (int i = threadIdx.x; i < (1 << LB); i += blockDim.x) tbl[i] = a.table[i];
    __syncthreads();
  }
  constexpr int WPB = TB * K / 32;
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= a.rows) return;
  const int runs = a.cols >> 5, wpr = a.cols / TB * WPB;
  const uint* crow[R];
  float sc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, a.rows - 1);
    crow[r] = a.codes + (size_t)row * wpr;
    sc[r] = __half2float(a.scales[row]);
  }
  float a0[R][M], a1[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) { a0[r][m] = 0.0f; a1[r][m] = 0.0f; }
  for (int u = lane; u < runs; u += 32) {
    const int blk = u >> 3, rib = u & 7;  // T/32 = 8 runs per block
    const int w0 = (7 - rib) * K;
    uint w[R][K + 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint* bw = crow[r] + blk * WPB;
      if (WIDE && K == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(bw + w0);
        w[r][0] = v.x; w[r][1] = v.y; w[r][2] = v.z; w[r][3] = v.w;
        w[r][K] = bw[rib == 0 ? 0 : w0 + K];
      } else if (WIDE && K == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(bw + w0);
        w[r][0] = v.x; w[r][1] = v.y;
        w[r][K] = bw[rib == 0 ? 0 : w0 + K];
      } else {
#pragma unroll
        for (int i = 0; i <= K; ++i) {
          const int wi = w0 + i;
          w[r][i] = bw[wi >= WPB ? wi - WPB : wi];
        }
      }
    }
    uint4 xv[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int q = 0; q < 4; ++q) xv[m][q] = a.x[((size_t)m * a.cols + (size_t)u * 32) / 8 + q];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      float xf[M];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint p = xword(xv[m][j >> 3], (j >> 1) & 3);
        xf[m] = (j & 1) ? __uint_as_float(p & 0xffff0000u) : __uint_as_float(p << 16);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint s = state_of<K>(w[r], j);
        float wv;
        if (DEC == 0) wv = bf16r_pack(__fmul_rn(onemad_new(s), sc[r]));
        else if (DEC == 1) wv = bf16r_single(__fmul_rn(tbl[s], sc[r]));
        else wv = bf16r_single(__fmul_rn(onemad_old(s), sc[r]));
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (j & 1) a1[r][m] = __fmaf_rn(wv, xf[m], a1[r][m]);
          else a0[r][m] = __fmaf_rn(wv, xf[m], a0[r][m]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float v = butterfly(__fadd_rn(a0[r][m], a1[r][m]));
      if (lane == 0 && row0 + r < a.rows) a.y[(size_t)m * a.rows + row0 + r] = f2bf(v);
    }
}


// DEC 3: the byte-sum table. 1mad's value depends on the state only through its byte
// sum y (0..1020), so a 1024-entry f32 table of value(y) replaces FADD, FMUL and FFMA by
// one LDS; dp4a(x, 4*REP per byte, base + 4*(lane % REP)) is the LDS byte address
// directly. The table is replicated REP times, interleaved (copy lane % REP), so lanes
// reading different y rarely share a bank (REP 32: never). Persistent grid; dynamic
// shared memory of 4 KB * REP.
template <int K, int M, int R, int REP>
__global__ void __launch_bounds__(512) reduce_bytesum(Args a) {
  extern __shared__ float stbl[];
  for (int i = threadIdx.x; i < 1024 * REP; i += blockDim.x) {
    const int y = i / REP;
    stbl[i] = y <= 1020 ? (float)(y - 510) / 147.800537109375f : 0.0f;
  }
  __syncthreads();
  constexpr int WPB = TB * K / 32;
  const int lane = threadIdx.x & 31;
  const uint base = (uint)__cvta_generic_to_shared(stbl) + 4u * (uint)(lane % REP);
  const int runs = a.cols >> 5, wpr = a.cols / TB * WPB;
  const int warps = blockDim.x >> 5, sets = (a.rows + R - 1) / R;
  for (int set = blockIdx.x * warps + (threadIdx.x >> 5); set < sets; set += gridDim.x * warps) {
    const int row0 = set * R;
    const uint* crow[R];
    float sc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = min(row0 + r, a.rows - 1);
      crow[r] = a.codes + (size_t)row * wpr;
      sc[r] = __half2float(a.scales[row]);
    }
    float a0[R][M], a1[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) { a0[r][m] = 0.0f; a1[r][m] = 0.0f; }
    for (int u = lane; u < runs; u += 32) {
      const int blk = u >> 3, rib = u & 7;
      const int w0 = (7 - rib) * K;
      uint w[R][K + 1];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint* bw = crow[r] + blk * WPB;
#pragma unroll
        for (int i = 0; i <= K; ++i) {
          const int wi = w0 + i;
          w[r][i] = bw[wi >= WPB ? wi - WPB : wi];
        }
      }
      uint4 xv[M][4];
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int q = 0; q < 4; ++q) xv[m][q] = a.x[((size_t)m * a.cols + (size_t)u * 32) / 8 + q];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        float xf[M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint p = xword(xv[m][j >> 3], (j >> 1) & 3);
          xf[m] = (j & 1) ? __uint_as_float(p & 0xffff0000u) : __uint_as_float(p << 16);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint s = state_of<K>(w[r], j);
          uint addr;
          asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(addr) : "r"(s * MAD_MUL + MAD_ADD), "r"(0x01010101u * (4u * REP)), "r"(base));
          float v;
          asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
          const float wv = bf16r_pack(__fmul_rn(v, sc[r]));
#pragma unroll
          for (int m = 0; m < M; ++m) {
            if (j & 1) a1[r][m] = __fmaf_rn(wv, xf[m], a1[r][m]);
            else a0[r][m] = __fmaf_rn(wv, xf[m], a0[r][m]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float v = butterfly(__fadd_rn(a0[r][m], a1[r][m]));
        if (lane == 0 && row0 + r < a.rows) a.y[(size_t)m * a.rows + row0 + r] = f2bf(v);
      }
  }
}

typedef void (*KernelFn)(Args);
struct Proto {
  int k, m, r, wide, dec;
  KernelFn fn;
};

#ifndef DRIVER
// One object per (k, M), compiled in parallel: every (R, WIDE, DEC) of it.
#define PR(K, M, R, W, D) {K, M, R, W, D, reduce_proto<K, M, R, W, D>},
#define PT(K, M, R, REP) {K, M, R, REP, 3, reduce_bytesum<K, M, R, REP>},
#define PR_M(K, M) PR(K, M, 2, 0, 0) PR(K, M, 4, 0, 0) PR(K, M, 1, 0, 1) \
  PT(K, M, 2, 8) PT(K, M, 4, 8) PT(K, M, 2, 32) PT(K, M, 4, 32) PT(K, M, 4, 16)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
extern "C" const Proto* CAT(CAT(CAT(protos_k, KSEL), _m), MSEL)(int* n) {
  static const Proto p[] = {PR_M(KSEL, MSEL)};
  *n = sizeof p / sizeof p[0];
  return p;
}
#else
// ---------------------------------------------------------------- driver
#include <cublas_v2.h>
#include <cublasLt.h>
#define DECL(K, M) extern "C" __attribute__((weak)) const Proto* protos_k##K##_m##M(int*);
DECL(2, 1) DECL(2, 4) DECL(2, 8) DECL(3, 1) DECL(3, 4) DECL(3, 8) DECL(4, 1) DECL(4, 4) DECL(4, 8)

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CB(x) do { int e_ = (int)(x); if (e_ != 0) { fprintf(stderr, "%s:%d %s: cublas %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static uint f32_bits(float f) { uint b; memcpy(&b, &f, 4); return b; }
static float bits_f32(uint b) { float f; memcpy(&f, &b, 4); return f; }
static unsigned short bf16_bits(float f) {
  const uint x = f32_bits(f);
  return (unsigned short)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
static float bf16_round(float f) { return bits_f32((uint)bf16_bits(f) << 16); }
static uint bytesum(uint x) { return (x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + (x >> 24); }
// SPEC 3: IEEE f32 division of exact operands.
static float onemad_ref(uint s) {
  const uint x = s * MAD_MUL + MAD_ADD;
  return (float)((int)bytesum(x) - 510) / 147.800537109375f;
}
// SPEC 2: the state of weight t of block b of a row.
static uint state_ref(const uint* rowc, int k, int b, int t) {
  const int wpb = TB * k / 32, nb = TB * k;
  uint s = 0;
  for (int j = 0; j < LB; ++j) {
    const int i = ((TB - 1 - t) * k + j) % nb;
    s |= ((rowc[b * wpb + (i >> 5)] >> (i & 31)) & 1u) << j;
  }
  return s;
}
// SPEC 4-5 for one row, every sample.
static void reduce_ref(const uint* rowc, float scale, const std::vector<float>& xf, int cols, int k, int m,
                       unsigned short* out) {
  std::vector<float> w(cols);
  for (int c = 0; c < cols; ++c) w[c] = bf16_round(onemad_ref(state_ref(rowc, k, c / TB, c % TB)) * scale);
  for (int mi = 0; mi < m; ++mi) {
    float v[32];
    for (int l = 0; l < 32; ++l) {
      float a0 = 0.0f, a1 = 0.0f;
      for (int u = l; u < cols / 32; u += 32)
        for (int j = 0; j < 32; ++j) {
          const int c = u * 32 + j;
          if (j & 1) a1 = fmaf(w[c], xf[(size_t)mi * cols + c], a1);
          else a0 = fmaf(w[c], xf[(size_t)mi * cols + c], a0);
        }
      v[l] = a0 + a1;
    }
    for (int o = 16; o > 0; o >>= 1) {
      float t[32];
      for (int l = 0; l < 32; ++l) t[l] = v[l] + v[l ^ o];
      memcpy(v, t, sizeof v);
    }
    out[mi] = bf16_bits(v[0]);
  }
}

__global__ void fill_u32(uint* p, size_t n, uint seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint h = (uint)i * 0x9E3779B1u ^ seed * 0x85EBCA77u ^ (uint)(i >> 32) * 0xC2B2AE3Du;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    p[i] = h;
  }
}
__global__ void fill_bf16(unsigned short* p, size_t n, uint seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint h = (uint)i * 0x9E3779B1u ^ seed * 0x85EBCA77u;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12;
    const float v = ((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 0.02f;
    p[i] = (unsigned short)(__float_as_uint(v) >> 16);
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b)); }
  // median over `reps` of the mean of `batch` launches
  template <class F> float us(F f, int copies, int reps = 15, int batch = 10) {
    for (int i = 0; i < 3; ++i) f(i % copies);
    CK(cudaDeviceSynchronize());
    std::vector<float> v;
    int it = 0;
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(a));
      for (int i = 0; i < batch; ++i) f(it++ % copies);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      v.push_back(ms * 1000.0f / batch);
    }
    CK(cudaGetLastError());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

static const char* dec_name(int d) { return d == 0 ? "new" : d == 1 ? "seed-tbl" : d == 2 ? "old-inline" : "bytesum-tbl"; }

int main(int argc, char** argv) {
  // Optional: `proto ONLY rows cols k m r wide dec` runs one kernel a few times (for ncu).
  const bool only = argc > 1 && std::string(argv[1]) == "only";
  std::vector<Proto> all;
  for (auto get : {protos_k2_m1, protos_k2_m4, protos_k2_m8, protos_k3_m1, protos_k3_m4, protos_k3_m8,
                   protos_k4_m1, protos_k4_m4, protos_k4_m8}) {
    if (!get) continue;  // objects of other k not linked in
    int n;
    const Proto* p = get(&n);
    all.insert(all.end(), p, p + n);
  }
  // Host check of the decode facts: r_hi, r_lo and every y.
  {
    const double inv = 1.0 / 147.800537109375;
    const float hi = (float)inv, lo = (float)(inv - (double)hi);
    printf("r_hi 0x%08x (want 0x%08x)  r_lo 0x%08x (want 0x%08x)\n", f32_bits(hi), R_HI, f32_bits(lo), R_LO);
    int bad = 0;
    for (int y = -510; y <= 510; ++y) {
      const float fy = (float)y;
      if (f32_bits(fmaf(fy, bits_f32(R_HI), fy * bits_f32(R_LO))) != f32_bits(fy / 147.800537109375f)) ++bad;
    }
    printf("fma(y, r_hi, y*r_lo) != y/c for %d of 1021 y\n", bad);
  }
  cublasHandle_t blas;
  CB(cublasCreate(&blas));
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  void* ltws;
  const size_t ltws_bytes = 64 << 20;
  CK(cudaMalloc(&ltws, ltws_bytes));
  std::vector<float> table(1 << LB);
  for (uint s = 0; s < table.size(); ++s) table[s] = onemad_ref(s);
  float* dtable;
  CK(cudaMalloc(&dtable, table.size() * 4));
  CK(cudaMemcpy(dtable, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  Timer tm;
  FILE* csv = fopen(getenv("OUT") ? (std::string(getenv("OUT")) + "/proto.csv").c_str() : "proto.csv", "w");
  fprintf(csv, "rows,cols,k,m,kernel,r,wide,dec,warps,us,exact\n");
  const int shapes[2][2] = {{17408, 5120}, {5120, 17408}};
  for (auto& sh : shapes) {
    const int rows = sh[0], cols = sh[1];
    if (only && (rows != atoi(argv[2]) || cols != atoi(argv[3]))) continue;
    // dense bf16 baseline, once per shape and M (independent of k)
    const size_t wsz = (size_t)rows * cols * 2;
    const int dcopies = 3;
    std::vector<void*> dense(dcopies);
    for (auto& d : dense) { CK(cudaMalloc(&d, wsz)); fill_bf16<<<1024, 256>>>((unsigned short*)d, wsz / 2, 7); }
    void *xd, *yd;
    CK(cudaMalloc(&xd, (size_t)8 * cols * 2));
    CK(cudaMalloc(&yd, (size_t)8 * rows * 2));
    fill_bf16<<<64, 256>>>((unsigned short*)xd, (size_t)8 * cols, 99);
    float dense_us[9] = {0};
    if (!only) for (int m : {1, 4, 8}) {
      const float one = 1.0f, zero = 0.0f;
      auto gemm = [&](int i) {
        CB(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, m, cols, &one, dense[i], CUDA_R_16BF, cols, xd,
                        CUDA_R_16BF, cols, &zero, yd, CUDA_R_16BF, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      const float gex = tm.us(gemm, dcopies);
      // cuBLASLt: its heuristics' top 8, the best of them
      cublasLtMatmulDesc_t op;
      CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      cublasLtMatrixLayout_t la, lb, lc;
      CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, cols, rows, cols));
      CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, cols, m, cols));
      CB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, rows, m, rows));
      cublasLtMatmulPreference_t pref;
      CB(cublasLtMatmulPreferenceCreate(&pref));
      CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ltws_bytes, sizeof ltws_bytes));
      cublasLtMatmulHeuristicResult_t res[8];
      int nres = 0;
      CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &nres));
      float best = 1e9f;
      for (int h = 0; h < nres; ++h) {
        auto ltm = [&](int i) {
          CB(cublasLtMatmul(lt, op, &one, dense[i], la, xd, lb, &zero, yd, lc, yd, lc, &res[h].algo, ltws, ltws_bytes, 0));
        };
        best = std::min(best, tm.us(ltm, dcopies));
      }
      dense_us[m] = std::min(gex, best);
      printf("%dx%d M=%d dense bf16: cublasGemmEx %.1f us, cublasLt best of %d %.1f us\n", rows, cols, m, gex, nres, best);
      fprintf(csv, "%d,%d,0,%d,cublasGemmEx,0,0,0,0,%.2f,\n", rows, cols, m, gex);
      fprintf(csv, "%d,%d,0,%d,cublasLt,0,0,0,0,%.2f,\n", rows, cols, m, best);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(op);
    }
    for (auto d : dense) CK(cudaFree(d));
    for (int k : {2, 3, 4}) {
      if (only && k != atoi(argv[4])) continue;
      if (getenv("PROTO_K") && k != atoi(getenv("PROTO_K"))) continue;
      const size_t nwords = (size_t)rows * (cols / TB) * (TB * k / 32);
      const int copies = (int)std::max<size_t>(2, std::min<size_t>(12, (size_t)(400u << 20) / (nwords * 4) + 1));
      std::vector<uint*> codes(copies);
      for (int c = 0; c < copies; ++c) { CK(cudaMalloc(&codes[c], nwords * 4)); fill_u32<<<2048, 256>>>(codes[c], nwords, 1000 + c + 10 * k); }
      std::vector<__half> sch(rows);
      for (int r = 0; r < rows; ++r) sch[r] = __float2half(0.5f + (float)((r * 37) % 101) / 101.0f);
      __half* sd;
      CK(cudaMalloc(&sd, rows * 2));
      CK(cudaMemcpy(sd, sch.data(), rows * 2, cudaMemcpyHostToDevice));
      // host reference on sampled rows of copy 0 (first, last, and a stride)
      std::vector<uint> hc(nwords);
      CK(cudaMemcpy(hc.data(), codes[0], nwords * 4, cudaMemcpyDeviceToHost));
      std::vector<unsigned short> hx((size_t)8 * cols);
      CK(cudaMemcpy(hx.data(), xd, hx.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<float> xf(hx.size());
      for (size_t i = 0; i < hx.size(); ++i) xf[i] = bits_f32((uint)hx[i] << 16);
      std::vector<int> check_rows;
      for (int r = 0; r < rows; r += 211) check_rows.push_back(r);
      for (int r = rows - 5; r < rows; ++r) check_rows.push_back(r);
      const int wpr = cols / TB * (TB * k / 32);
      std::vector<unsigned short> want(check_rows.size() * 8);
      for (size_t i = 0; i < check_rows.size(); ++i)
        reduce_ref(hc.data() + (size_t)check_rows[i] * wpr, __half2float(sch[check_rows[i]]), xf, cols, k, 8, &want[i * 8]);
      std::vector<unsigned short> got((size_t)8 * rows);
      for (int m : {1, 4, 8}) {
        if (only && m != atoi(argv[5])) continue;
        float seed_us = 0, best_us = 1e9f;
        std::string best_name;
        for (const Proto& p : all) {
          if (p.k != k || p.m != m) continue;
          if (only && (p.r != atoi(argv[6]) || p.wide != atoi(argv[7]) || p.dec != atoi(argv[8]))) continue;
          for (int warps : {4, 8, 16}) {
            if (p.dec == 3 ? warps == 4 : (warps == 16 || (p.dec != 0 && warps == 4))) continue;
            const int rows_per_block = warps * p.r;
            dim3 grid((rows + rows_per_block - 1) / rows_per_block);
            const int smem = p.dec == 3 ? 4096 * p.wide : 0;
            if (p.dec == 3) {
              CK(cudaFuncSetAttribute((const void*)p.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
              int per_sm = 0, sms = 0;
              CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p.fn, warps * 32, smem));
              CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
              grid = dim3(std::min<unsigned>(grid.x, (unsigned)(per_sm * sms)));
            }
            auto launch = [&](int i) {
              Args a{(const uint4*)xd, codes[i], sd, dtable, (unsigned short*)yd, rows, cols};
              p.fn<<<grid, warps * 32, smem>>>(a);
            };
            CK(cudaMemset(yd, 0xFF, (size_t)8 * rows * 2));
            launch(0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), yd, (size_t)m * rows * 2, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (size_t i = 0; i < check_rows.size(); ++i)
              for (int mi = 0; mi < m; ++mi)
                if (got[(size_t)mi * rows + check_rows[i]] != want[i * 8 + mi]) ++bad;
            if (only) { for (int i = 0; i < 5; ++i) launch(i % copies); CK(cudaDeviceSynchronize()); printf("ran once for ncu, bad %d\n", bad); continue; }
            const float us = tm.us(launch, copies);
            const char* kname = p.dec == 1 ? "seed" : p.dec == 2 ? "oldinline" : p.dec == 3 ? "bytesum" : "proto";
            fprintf(csv, "%d,%d,%d,%d,%s,%d,%d,%d,%d,%.2f,%s\n", rows, cols, k, m, kname, p.r, p.wide, p.dec, warps, us, bad ? "NO" : "yes");
            char name[96];
            snprintf(name, sizeof name, p.dec == 3 ? "%s R=%d rep=%d warps=%d" : "%s R=%d wide=%d warps=%d", dec_name(p.dec), p.r, p.wide, warps);
            printf("  %dx%d k=%d M=%d %-28s %7.1f us %s%s\n", rows, cols, k, m, name, us, bad ? "MISMATCH " : "exact", "");
            if (p.dec == 1) seed_us = us;
            if ((p.dec == 0 || p.dec == 3) && !bad && us < best_us) { best_us = us; best_name = name; }
          }
        }
        if (!only)
          printf("SUMMARY %dx%d k=%d M=%d: best %s %.1f us | seed %.1f us | dense %.1f us | dense/best %.2f seed/best %.2f\n",
                 rows, cols, k, m, best_name.c_str(), best_us, seed_us, dense_us[m], dense_us[m] / best_us, seed_us / best_us);
      }
      for (auto c : codes) CK(cudaFree(c));
      CK(cudaFree(sd));
    }
    CK(cudaFree(xd));
    CK(cudaFree(yd));
  }
  fclose(csv);
  return 0;
}
#endif
