#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/runtime.hpp"

namespace troupe {

namespace cuda {

void fail_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  ::troupe::fail("CUDA call", expr, file, line,
                 str_cat("CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

void fail_cublas(cublasStatus_t st, const char* expr, const char* file, int line) {
  ::troupe::fail("cuBLAS call", expr, file, line,
                 str_cat("cuBLAS error ", cublasGetStatusName(st), ": ", cublasGetStatusString(st)));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

size_t memory_in_use(int device) {
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  TROUPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

size_t memory_total(int device) {
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  TROUPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b;
}

void* device_alloc(int device, size_t bytes) {
  if (bytes == 0) return nullptr;
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    (void)cudaGetLastError();
    (void)cudaMemGetInfo(&free_b, &total_b);
    TROUPE_FAIL("cudaMalloc of ", bytes, " bytes on cuda:", device, " failed (", cudaGetErrorString(err), "); free ",
                free_b, " of ", total_b, " bytes");
  }
  return p;
}

void device_free(int device, void* ptr) noexcept {
  if (!ptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}

void pinned_free(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void memcpy_async(const Context& ctx, void* dst, const void* src, size_t bytes, bool sync) {
  if (bytes == 0) return;
  cudaStream_t s = stream_of(ctx);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  if (sync) TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
}

void memcpy_2d_async(const Context& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                     size_t rows) {
  if (width == 0 || rows == 0) return;
  TROUPE_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream_of(ctx)));
}

void memset_async(const Context& ctx, void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  TROUPE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_of(ctx)));
}

void* event_create() {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void event_destroy(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(const Context& ctx, void* event) {
  TROUPE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_of(ctx)));
}

float event_elapsed_ms(void* start, void* end) {
  TROUPE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  float ms = 0;
  TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace cuda

CudaState::~CudaState() {
  cudaSetDevice(device);
  cudnn.reset();  // its handle works on `stream`: gone first
  for (StreamLane& lane : lanes) {
    if (lane.done) cudaEventDestroy(lane.done);
    if (lane.workspace) cudaFree(lane.workspace);
    if (lane.stream) cudaStreamDestroy(lane.stream);
  }
  if (fork) cudaEventDestroy(fork);
  if (workspace) cudaFree(workspace);
  if (lt) cublasLtDestroy(lt);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
}

void CudaStateDeleter::operator()(CudaState* s) const noexcept { delete s; }

std::unique_ptr<CudaState, CudaStateDeleter> make_cuda_state(int device) {
  const int n = cuda::device_count();
  TROUPE_CHECK(device >= 0 && device < n, "no CUDA device ", device, " (", n, " visible)");
  std::unique_ptr<CudaState, CudaStateDeleter> st(new CudaState());
  st->device = device;
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
  TROUPE_CUBLAS_CHECK(cublasLtCreate(&st->lt));
  TROUPE_CUBLAS_CHECK(cublasCreate(&st->blas));
  TROUPE_CUBLAS_CHECK(cublasSetStream(st->blas, st->stream));
  st->workspace_bytes = size_t(32) << 20;  // cuBLASLt wants >= 32 MiB on Hopper
  TROUPE_CUDA_CHECK(cudaMalloc(&st->workspace, st->workspace_bytes));
  TROUPE_CUBLAS_CHECK(cublasSetWorkspace(st->blas, st->workspace, st->workspace_bytes));
  cudaDeviceProp prop{};
  TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  st->sm_count = prop.multiProcessorCount;
  st->smem_per_block_optin = prop.sharedMemPerBlockOptin;
  return st;
}

void cuda_synchronize(const CudaState& st) { TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream)); }

void cuda_activate(const CudaState& st) { TROUPE_CUDA_CHECK(cudaSetDevice(st.device)); }

}  // namespace troupe
