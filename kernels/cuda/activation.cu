#include "kernels/activation.hpp"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/fp8_convert.cuh"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kFp8BlocksPerSm = 8;  // the FP8 side output's grid: one amax atomic per block

// 16-byte packs, one a thread (a grid-stride loop where the grid is smaller); the element count
// must be a multiple of the pack size, which the launcher checks (hidden sizes are multiples of
// 8). kFp8: y's FP8 side output (fp8.q laid out as y).
template <typename T, bool kFp8>
__global__ void gelu_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Fp8SidePtrs fp8) {
  constexpr int P = Pack128<T>::size;
  const float q_scale = kFp8 && fp8.q ? *fp8.scale : 0.0f;
  unsigned best = 0;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * P; i < n;
       i += int64_t(gridDim.x) * blockDim.x * P) {
    Pack128<T> in = load128cs(x + i), out;
#pragma unroll
    for (int k = 0; k < P; ++k) out[k] = from_f32<T>(gelu_of(to_f32(in[k])));
    store128(y + i, out);
    if constexpr (kFp8) fp8_side_pack(out, fp8, q_scale, i, best);
  }
  if constexpr (kFp8)
    if (fp8.amax) amax_commit(best, fp8.amax);  // every thread of the block gets here
}

template <typename T>
__global__ void gelu_backward_kernel(const T* dy, const T* __restrict__ x, T* dx, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * Pack128<T>::size;
  if (i >= n) return;
  Pack128<T> in = load128cs(x + i), g = load128cs(dy + i), out;
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) out[k] = from_f32<T>(to_f32(g[k]) * gelu_grad_of(to_f32(in[k])));
  store128(dx + i, out);
}

// gelu_backward_kernel's work as a column-sum source (kernels/cuda/column_sum.cuh), kVec elements
// at a time (16-byte packs, or 1 where the width is no multiple of a pack or a tensor is not
// 16-byte aligned): writes dx and yields
// it as rounded, so the bias gradient sums exactly the dx stored.
template <typename T, int kVec>
struct GeluBackwardColumns {
  const T* dy;
  const T* __restrict__ x;
  T* dx;
  __device__ void operator()(int64_t i, float (&v)[kVec]) const {
    if constexpr (kVec == Pack128<T>::size) {
      Pack128<T> in = load128cs(x + i), g = load128cs(dy + i), out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        out[k] = from_f32<T>(to_f32(g[k]) * gelu_grad_of(to_f32(in[k])));
        v[k] = to_f32(out[k]);
      }
      store128(dx + i, out);
    } else {
      const T out = from_f32<T>(to_f32(dy[i]) * gelu_grad_of(to_f32(x[i])));
      v[0] = to_f32(out);
      dx[i] = out;
    }
  }
};

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t f) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * Pack128<T>::size;
  if (i >= rows * f) return;
  const int64_t r = i / f, j = i % f;
  const T* gate = x + r * 2 * f + j;
  Pack128<T> gv = load128cs(gate), uv = load128cs(gate + f), out;
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) {
    const float g = to_f32(gv[k]);
    out[k] = from_f32<T>(g / (1.0f + expf(-g)) * to_f32(uv[k]));
  }
  store128(y + i, out);
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                       int64_t rows, int64_t f) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * Pack128<T>::size;
  if (i >= rows * f) return;
  const int64_t r = i / f, j = i % f;
  const int64_t base = r * 2 * f + j;
  Pack128<T> gv = load128cs(x + base), uv = load128cs(x + base + f), dv = load128cs(dy + i), dg, du;
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) {
    const float g = to_f32(gv[k]), u = to_f32(uv[k]), d = to_f32(dv[k]);
    const float s = 1.0f / (1.0f + expf(-g));
    du[k] = from_f32<T>(d * g * s);
    dg[k] = from_f32<T>(d * u * s * (1.0f + g * (1.0f - s)));
  }
  store128(dx + base, dg);
  store128(dx + base + f, du);
}

template <typename T>
void check_packed(const char* op, int64_t n) {
  TROUPE_CHECK(n % Pack128<T>::size == 0, op, ": CUDA kernel needs the (last) size to be a multiple of ",
               Pack128<T>::size, ", got ", n);
}
}  // namespace

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Fp8SideOutput& fp8) {
  constexpr const char* op = "gelu_forward";
  const Fp8SidePtrs side = fp8_side_ptrs(op, fp8);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel();
    check_packed<T>(op, n);
    if (n == 0) return;
    const int64_t blocks = ceil_div(n / Pack128<T>::size, kThreads);
    if (side.any()) {
      const int64_t most = int64_t(ctx.cuda_state().sm_count) * kFp8BlocksPerSm;
      gelu_forward_kernel<T, true>
          <<<unsigned(std::min(blocks, most)), kThreads, 0, stream_of(ctx)>>>(x.data_as<T>(), y.data_as<T>(), n, side);
    } else {
      gelu_forward_kernel<T, false>
          <<<unsigned(blocks), kThreads, 0, stream_of(ctx)>>>(x.data_as<T>(), y.data_as<T>(), n, side);
    }
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  dispatch_float(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel();
    check_packed<T>("gelu_backward", n);
    if (n == 0) return;
    gelu_backward_kernel<T><<<ceil_div(n / Pack128<T>::size, kThreads), kThreads, 0, stream_of(ctx)>>>(
        dy.data_as<T>(), x.data_as<T>(), dx.data_as<T>(), n);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward_bias_grad(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx,
                             const Tensor& db) {
  constexpr const char* op = "gelu_backward_bias_grad";
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kPack = Pack128<T>::size;
    const int64_t rows = x.dim(0), cols = x.dim(1);
    const T *g = dy.data_as<T>(), *in = x.data_as<T>();
    T* out = dx.data_as<T>();
    const bool packed =
        cols % kPack == 0 &&
        (reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    if (packed)
      column_sums<kPack>(ctx, op, GeluBackwardColumns<T, kPack>{g, in, out}, rows, cols, db.data_as<float>());
    else
      column_sums<1>(ctx, op, GeluBackwardColumns<T, 1>{g, in, out}, rows, cols, db.data_as<float>());
  });
}

void swiglu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  dispatch_float(x.dtype(), "swiglu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = y.dim(0), f = y.dim(1);
    check_packed<T>("swiglu_forward", f);
    if (rows * f == 0) return;
    swiglu_forward_kernel<T><<<ceil_div(rows * f / Pack128<T>::size, kThreads), kThreads, 0, stream_of(ctx)>>>(
        x.data_as<T>(), y.data_as<T>(), rows, f);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  dispatch_float(x.dtype(), "swiglu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = dy.dim(0), f = dy.dim(1);
    check_packed<T>("swiglu_backward", f);
    if (rows * f == 0) return;
    swiglu_backward_kernel<T><<<ceil_div(rows * f / Pack128<T>::size, kThreads), kThreads, 0, stream_of(ctx)>>>(
        dy.data_as<T>(), x.data_as<T>(), dx.data_as<T>(), rows, f);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
