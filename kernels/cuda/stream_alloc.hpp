// Stream-ordered device memory (cudaMallocAsync / cudaFreeAsync on a context's stream), for
// memory whose every use is ordered on one stream: Tensor::stream_ordered, MoE temporaries,
// host collectives' staging. A cudaMalloc'ed Tensor's cudaFree synchronizes the whole device
// (every stream of it, communication streams included); the stream-ordered pool reuses freed
// blocks without waiting.
#pragma once

#include <cstddef>

#include "kernels/context.hpp"

namespace troupe::cuda {

// At least 256 bytes (a defined, aligned pointer even for an empty tensor), on ctx's stream.
void* stream_alloc(const Context& ctx, size_t bytes);
// Released after the work enqueued on `stream` (ctx's cudaStream_t) so far; never throws.
void stream_free(void* stream, void* ptr) noexcept;
void stream_free(const Context& ctx, void* ptr) noexcept;
// ctx's stream, as the opaque handle stream_free takes.
void* stream_handle(const Context& ctx);

}  // namespace troupe::cuda
