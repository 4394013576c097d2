// Small host arrays to the device without the host waiting: cudaMemcpyAsync from pageable host
// memory may synchronize with the stream before it stages the copy (the CUDA runtime's documented
// behaviour), which holds the enqueuing thread until the GPU has caught up. An MoE layer uploads
// its grouped GEMMs' pointer arrays and expert offsets several times per forward and backward;
// with that wait the host could never run ahead of the device. Here the bytes ride in kernel
// parameters (copied at launch), a launch per 3 KiB.
#pragma once

#include <cstddef>

#include "kernels/context.hpp"

namespace troupe::cuda {

// dst: `bytes` of device memory; src: host memory, free to reuse when this returns. Enqueued on
// ctx's stream.
void upload_async(const Context& ctx, void* dst, const void* src, size_t bytes);

}  // namespace troupe::cuda
