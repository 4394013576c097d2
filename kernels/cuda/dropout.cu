#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/dropout.hpp"
#include "kernels/philox.hpp"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;

// The four elements that share one Philox counter, as one 8- or 16-byte access.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

template <typename T>
__device__ __forceinline__ T dropout_one(T x, uint32_t word, float p, float scale) {
  return from_f32<T>(philox_uniform(word) >= p ? to_f32(x) * scale : 0.0f);
}

// One thread per Philox counter: counter offset/4 + t covers elements i = 4 * counter + w - offset,
// w = 0..3, of which those in [0, n) are written. kAligned (offset % 4 == 0 and both pointers
// aligned to a Quad): the thread's elements are 4t .. 4t+3 and move as one vector when all
// are in range. `out` may alias `in`: each thread reads its elements before writing them.
template <typename T, bool kAligned>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, int64_t counters, float p, float scale, uint64_t seed,
                               uint64_t offset) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= counters) return;
  const uint64_t counter = offset / 4 + uint64_t(t);
  const PhiloxWords r = philox4x32_10(counter, seed);
  const int64_t i0 = int64_t(counter * 4 - offset);  // -3..0 for the first counter when unaligned
  if (kAligned && i0 + 4 <= n) {
    const Quad<T> x = *reinterpret_cast<const Quad<T>*>(in + i0);
    Quad<T> y;
#pragma unroll
    for (int w = 0; w < 4; ++w) y.v[w] = dropout_one(x.v[w], r.w[w], p, scale);
    *reinterpret_cast<Quad<T>*>(out + i0) = y;
    return;
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const int64_t i = i0 + w;
    if (i >= 0 && i < n) out[i] = dropout_one(in[i], r.w[w], p, scale);
  }
}

bool aligned_to(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

void launch_dropout(const Context& ctx, const char* op, const Tensor& in, const Tensor& out, float p, uint64_t seed,
                    uint64_t offset) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const int64_t counters = int64_t((offset + uint64_t(n) - 1) / 4 - offset / 4) + 1;
  const float scale = 1.0f / (1.0f - p);
  dispatch_float(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool aligned =
        offset % 4 == 0 && aligned_to(in.data(), sizeof(Quad<T>)) && aligned_to(out.data(), sizeof(Quad<T>));
    auto kernel = aligned ? dropout_kernel<T, true> : dropout_kernel<T, false>;
    kernel<<<ceil_div(counters, kThreads), kThreads, 0, stream_of(ctx)>>>(in.data_as<T>(), out.data_as<T>(), n,
                                                                          counters, p, scale, seed, offset);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}
}  // namespace

void dropout_forward(const Context& ctx, const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset) {
  launch_dropout(ctx, "dropout_forward", x, y, p, seed, offset);
}

void dropout_backward(const Context& ctx, const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset) {
  launch_dropout(ctx, "dropout_backward", dy, dx, p, seed, offset);
}

}  // namespace troupe::cuda
