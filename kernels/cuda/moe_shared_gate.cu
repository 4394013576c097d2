// The shared expert's sigmoid gate on CUDA. Forward and backward are one warp per token row
// (the row's dot products, then its elementwise writes); the gate weight's gradient, a sum over
// tokens, is one thread per column walking the rows in order (deterministic, no atomics; the
// gate is one vector, so this is a small share of the layer).
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/moe_shared_gate.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void gate_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ out,
                                    float* __restrict__ gate, T* __restrict__ y, int64_t n, int64_t c) {
  const int64_t t = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= n) return;
  float logit = 0.0f;
  for (int64_t j = lane; j < c; j += 32) logit += to_f32(x[t * c + j]) * to_f32(w[j]);
  logit = warp_sum(logit);  // every lane holds the sum
  const float g = 1.0f / (1.0f + expf(-logit));
  if (lane == 0) gate[t] = g;
  for (int64_t j = lane; j < c; j += 32) y[t * c + j] = from_f32<T>(to_f32(y[t * c + j]) + g * to_f32(out[t * c + j]));
}

template <typename T>
__global__ void gate_backward_kernel(const T* __restrict__ w, const float* __restrict__ gate, const T* __restrict__ out,
                                     const T* __restrict__ dy, T* __restrict__ dout, T* __restrict__ dx,
                                     float* __restrict__ dlogit, int64_t n, int64_t c) {
  const int64_t t = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= n) return;
  const float g = gate[t];
  float dot = 0.0f;
  for (int64_t j = lane; j < c; j += 32) {
    const float d = to_f32(dy[t * c + j]);
    dot += d * to_f32(out[t * c + j]);
    dout[t * c + j] = from_f32<T>(g * d);
  }
  const float dl = warp_sum(dot) * g * (1.0f - g);
  if (lane == 0) dlogit[t] = dl;
  for (int64_t j = lane; j < c; j += 32) dx[t * c + j] = from_f32<T>(to_f32(dx[t * c + j]) + dl * to_f32(w[j]));
}

// dw[j] += sum over rows t, in order, of dlogit[t] x[t, j].
template <typename T>
__global__ void gate_weight_grad_kernel(const T* __restrict__ x, const float* __restrict__ dlogit,
                                        float* __restrict__ dw, int64_t n, int64_t c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float sum = 0.0f;
  for (int64_t t = 0; t < n; ++t) sum += dlogit[t] * to_f32(x[t * c + j]);
  dw[j] += sum;
}

}  // namespace

void moe_shared_gate_forward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& out,
                             const Tensor& gate, const Tensor& y) {
  const int64_t n = x.dim(0), c = x.dim(1);
  if (n == 0) return;
  dispatch_float(x.dtype(), "moe_shared_gate_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gate_forward_kernel<T><<<ceil_div(n * 32, kThreads), kThreads, 0, stream_of(ctx)>>>(
        x.data_as<T>(), gate_w.data_as<T>(), out.data_as<T>(), gate.data_as<float>(), y.data_as<T>(), n, c);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void moe_shared_gate_backward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& gate,
                              const Tensor& out, const Tensor& dy, const Tensor& dout, const Tensor& dx,
                              const Tensor& dgate_w) {
  const int64_t n = x.dim(0), c = x.dim(1);
  if (n == 0 || c == 0) return;
  cudaStream_t stream = stream_of(ctx);
  StreamBuffer<float> dlogit(stream, size_t(n));
  dispatch_float(x.dtype(), "moe_shared_gate_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gate_backward_kernel<T><<<ceil_div(n * 32, kThreads), kThreads, 0, stream>>>(
        gate_w.data_as<T>(), gate.data_as<float>(), out.data_as<T>(), dy.data_as<T>(), dout.data_as<T>(),
        dx.data_as<T>(), dlogit.get(), n, c);
    TROUPE_CUDA_CHECK_LAUNCH();
    gate_weight_grad_kernel<T>
        <<<ceil_div(c, kThreads), kThreads, 0, stream>>>(x.data_as<T>(), dlogit.get(), dgate_w.data_as<float>(), n, c);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
