// Plain C++ interface to the CUDA runtime pieces that non-CUDA sources need
// (allocation, copies, device count). Defined in runtime.cu; only called when
// TROUPE_HAVE_CUDA is set.
#pragma once

#include <cstddef>

namespace troupe {
class Context;
namespace cuda {

int device_count();                // 0 when no driver or no device
size_t memory_in_use(int device);  // total - free
size_t memory_total(int device);
void* device_alloc(int device, size_t bytes);
void device_free(int device, void* ptr) noexcept;
// Pinned host memory: faster, asynchronous copies.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr) noexcept;
// Any-direction copy on ctx's stream (cudaMemcpyDefault); synchronous when `sync`.
void memcpy_async(const Context& ctx, void* dst, const void* src, size_t bytes, bool sync);
// `rows` rows of `width` bytes each, the rows `src_pitch` and `dst_pitch` bytes apart.
void memcpy_2d_async(const Context& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                     size_t rows);
void memset_async(const Context& ctx, void* dst, int value, size_t bytes);
// CUDA events (opaque handles) for timing work on a context's stream.
void* event_create();
void event_destroy(void* event) noexcept;
void event_record(const Context& ctx, void* event);
float event_elapsed_ms(void* start, void* end);  // synchronizes on `end`
// The device's SM clock now (NVML, kernels/cuda/sm_clock.cu); 0 where it cannot be read.
int sm_clock_mhz(int device);

}  // namespace cuda
}  // namespace troupe
