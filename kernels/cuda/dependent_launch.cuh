// Programmatic dependent launch (Hopper), shared by the decode kernels that use it (the GEMV,
// the paged attention). A kernel launched with it may start while the kernel before it on the
// stream finishes: it must call wait_for_prior_grids() before it reads anything that kernel
// writes, and may read before that only what earlier work wrote (weights, a step's metadata,
// older cache entries). A kernel calls allow_dependent_launch() once its blocks no longer need
// the SMs to themselves, so the next one can start its own early part.
//
// Every such kernel in Troupe calls allow_dependent_launch() only after its own wait, so when a
// kernel starts early, everything before the kernel it follows has completed.
#pragma once

#include <cuda_runtime.h>

namespace troupe::cuda {

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// TROUPE_DECODE_PDL, read once: unset or "1": such kernels are launched early on Hopper; "0": not
// (for comparisons). Throws troupe::Error naming the variable for anything else.
bool dependent_launch_enabled();

// Whether `kernel` was compiled with its griddepcontrol.wait (PTX for sm_90 or newer; an older
// PTX JIT-compiled for Hopper has none, and must not be launched early).
bool waits_for_prior_grids(const void* kernel);

// Adds to config the attribute that lets its kernel start early, when dependent_launch_enabled()
// and kernel_waits (waits_for_prior_grids, cached by the caller). attr must outlive the launch.
void allow_early_start(cudaLaunchConfig_t& config, cudaLaunchAttribute& attr, bool kernel_waits);

}  // namespace troupe::cuda
