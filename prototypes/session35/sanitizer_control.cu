// The negative control for compute-sanitizer on this project's path: a kernel compiled
// by NVRTC and loaded with the driver API (as the cuda backend does, through cudarc),
// with one out-of-bounds read of global memory, one shared-memory race and one barrier
// in divergent code. Each tool must report its defect here, or its clean reports on the
// project's kernels say nothing. Build on the device: nvcc -o control
// sanitizer_control.cu -lnvrtc -lcuda.
#include <cuda.h>
#include <nvrtc.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static const char *kSrc = R"(
extern "C" __global__ void oob_read(const float *x, float *y, int n) {
  // Reads x[n + 1024]: 4 KB past a 1 KB allocation.
  y[threadIdx.x] = x[threadIdx.x + n + 1024];
}
extern "C" __global__ void shared_race(float *y) {
  __shared__ float s[32];
  s[threadIdx.x % 32] = threadIdx.x;   // warps 0 and 1 write the same words
  y[threadIdx.x] = s[(threadIdx.x + 1) % 32];  // no barrier before the read
}
extern "C" __global__ void divergent_barrier(float *y) {
  if (threadIdx.x < 16) __syncthreads();  // half a warp at the barrier
  y[threadIdx.x] = 1.0f;
}
)";

#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); printf("%s: %s\n", #x, s); } } while (0)

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "oob_read";
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext ctx; CK(cuCtxCreate(&ctx, NULL, 0, dev));
  nvrtcProgram p; nvrtcCreateProgram(&p, kSrc, "control.cu", 0, nullptr, nullptr);
  const char *opts[] = {"--gpu-architecture=sm_90"};
  if (nvrtcCompileProgram(p, 1, opts) != NVRTC_SUCCESS) { printf("nvrtc failed\n"); return 1; }
  size_t n; nvrtcGetPTXSize(p, &n); std::vector<char> ptx(n); nvrtcGetPTX(p, ptx.data());
  CUmodule m; CK(cuModuleLoadData(&m, ptx.data()));
  CUfunction f; CK(cuModuleGetFunction(&f, m, which));
  CUdeviceptr x, y; CK(cuMemAlloc(&x, 1024)); CK(cuMemAlloc(&y, 1024));
  int cnt = 256;
  void *a1[] = {&x, &y, &cnt}, *a2[] = {&y};
  bool oob = std::string(which) == "oob_read";
  CK(cuLaunchKernel(f, 1, 1, 1, oob ? 32 : 64, 1, 1, 0, 0, oob ? a1 : a2, nullptr));
  CK(cuCtxSynchronize());
  printf("%s launched\n", which);
  return 0;
}
