// TROUPE_HOST_DEVICE: a function both the CPU backend (g++) and CUDA kernels (nvcc) call, so
// that the two backends share one definition of the arithmetic.
#pragma once

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TROUPE_HOST_DEVICE inline
#endif
