// Backend selection inside an op's dispatcher (kernels/<op>.cpp). The CUDA branch
// compiles only when the CUDA backend is built; otherwise it fails with a clear error.
#pragma once

#include "base/check.hpp"

#if TROUPE_HAVE_CUDA
#define TROUPE_ON_CUDA(call) call
#else
#define TROUPE_ON_CUDA(call) TROUPE_FAIL("this build has no CUDA backend (nvcc was not found at configure time)")
#endif
