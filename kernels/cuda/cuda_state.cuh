// What a CUDA Context owns, and the check macros for CUDA and cuBLAS calls.
// Included by .cu files only.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "base/check.hpp"
#include "kernels/context.hpp"

namespace troupe {

// cuDNN handle, attention plans and workspace (kernels/cuda/attention_cudnn.cu), made on first use.
struct CudnnState;
struct CudnnStateDeleter {
  void operator()(CudnnState* s) const noexcept;
};

// A side stream of a context with its own cuBLASLt workspace, as large as the context's (so a GEMM
// picks there the algorithm it picks on the context's stream). Made on first use by a StreamFork
// (kernels/cuda/stream_fork.cuh), which orders its work inside the context's stream.
struct StreamLane {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaEvent_t done = nullptr;  // recorded on `stream` when a fork joins
};

struct CudaState {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace
  size_t workspace_bytes = 0;
  int sm_count = 0;
  size_t smem_per_block_optin = 0;
  std::unique_ptr<CudnnState, CudnnStateDeleter> cudnn;  // null until the cuDNN attention backend runs
  cudaEvent_t fork = nullptr;     // recorded on `stream` where a StreamFork starts; made with the first lane
  std::vector<StreamLane> lanes;  // side streams, none until a StreamFork asks for them
  ~CudaState();
};

namespace cuda {
[[noreturn]] void fail_cuda(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t st, const char* expr, const char* file, int line);
// Shorthand for the stream of a CUDA context.
inline cudaStream_t stream_of(const Context& ctx) { return ctx.cuda_state().stream; }
}  // namespace cuda
}  // namespace troupe

#define TROUPE_CUDA_CHECK(call)                                                                        \
  do {                                                                                                 \
    cudaError_t troupe_err_ = (call);                                                                  \
    if (troupe_err_ != cudaSuccess) ::troupe::cuda::fail_cuda(troupe_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports bad launch configurations at the launch site.
#define TROUPE_CUDA_CHECK_LAUNCH() TROUPE_CUDA_CHECK(cudaGetLastError())

#define TROUPE_CUBLAS_CHECK(call)                                                                                \
  do {                                                                                                           \
    cublasStatus_t troupe_st_ = (call);                                                                          \
    if (troupe_st_ != CUBLAS_STATUS_SUCCESS) ::troupe::cuda::fail_cublas(troupe_st_, #call, __FILE__, __LINE__); \
  } while (0)
