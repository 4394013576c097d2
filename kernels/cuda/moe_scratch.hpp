// Stream-ordered device memory for the MoE ops' per-call temporaries (model/moe/scratch_tensor.hpp):
// cudaMallocAsync / cudaFreeAsync on the context's stream. A Tensor's own memory is cudaMalloc'ed
// and its cudaFree synchronizes the device, which an MoE layer's backward would otherwise do
// several times per microbatch; the stream-ordered pool reuses freed blocks without waiting.
#pragma once

#include <cstddef>

#include "kernels/context.hpp"

namespace troupe::cuda {

// At least 256 bytes (a defined, aligned pointer even for an empty tensor), on ctx's stream.
void* moe_stream_alloc(const Context& ctx, size_t bytes);
// Released after the work enqueued on ctx's stream so far; never throws.
void moe_stream_free(const Context& ctx, void* ptr) noexcept;

}  // namespace troupe::cuda
