// Vocab-parallel cross-entropy on CUDA: one block per row of this rank's logits [N, Vl], read
// with 16-byte loads, several in flight per thread.
//   max, sum_exp: read only the packs that hold valid columns (the padding never takes part),
//                 reduce over the block, one f32 per row out.
//   loss:         forward only, one thread per row (it needs no logits); backward, one block per
//                 row writing dlogits over the whole row (zero on the padding) and the loss.
// e^(x - max) is __expf: one MUFU op on (x - max) log2 e, whose error scales with |x - max|, not |x|.
#include <math_constants.h>

#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 4;  // 16-byte loads a thread issues before consuming them

template <typename T>
__device__ __forceinline__ int packs_of(int columns) {
  return (columns + Pack128<T>::size - 1) / Pack128<T>::size;
}

// Calls f(pack, col) for each pack of x[0, npacks * P) that this thread owns (col: the pack's
// first column), with kLoadsInFlight loads issued before the first is used. f may overwrite the
// pack it is given: only this thread reads it.
template <typename T, typename F>
__device__ __forceinline__ void for_each_pack(const T* x, int npacks, F&& f) {
  constexpr int P = Pack128<T>::size;
  for (int base = threadIdx.x; base < npacks; base += kThreads * kLoadsInFlight) {
    Pack128<T> p[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * kThreads;
      if (i < npacks) p[u] = load128(x + i * P);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * kThreads;
      if (i < npacks) f(p[u], i * P);
    }
  }
}

// A target other than -1 that this rank can tell is no token: negative, or at or past its first
// padding column (a shard holding padding, valid < cols, ends the vocabulary).
__device__ __forceinline__ bool is_bad_target(int32_t target, int64_t vocab_start, int valid, int cols) {
  return target != -1 && (target < 0 || (valid < cols && target >= vocab_start + valid));
}

// losses[n]: 0 for an ignored row, NaN for a bad target, else log(sum_exp) + max - target_logit.
__device__ __forceinline__ float row_loss(int32_t target, bool bad, float max, float sum, float picked) {
  if (target == -1) return 0.0f;
  if (bad) return CUDART_NAN_F;
  return (max - picked) + logf(sum);
}

// row_max[n] = max over j < valid of logits[n, j] (-inf when valid == 0). logits: [rows, cols].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_kernel(const T* __restrict__ logits, int cols, int valid, float* __restrict__ row_max) {
  constexpr int P = Pack128<T>::size;
  const int64_t row = blockIdx.x;
  float m = -INFINITY;
  for_each_pack(logits + row * cols, packs_of<T>(valid), [&](const Pack128<T>& p, int col) {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (col + k < valid) m = fmaxf(m, to_f32(p[k]));
  });
  m = block_max(m);
  if (threadIdx.x == 0) row_max[row] = m;
}

// sum_exp[n] = sum over j < valid of e^(logits[n, j] - row_max[n]); target_logit[n] = the target's
// logit when it is one of this rank's valid columns, NaN for a bad target, else 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_exp_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets, int cols, int valid,
                   int64_t vocab_start, const float* __restrict__ row_max, float* __restrict__ sum_exp,
                   float* __restrict__ target_logit) {
  constexpr int P = Pack128<T>::size;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  const float m = row_max[row];
  float s = 0.0f;
  for_each_pack(x, packs_of<T>(valid), [&](const Pack128<T>& p, int col) {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (col + k < valid) s += __expf(to_f32(p[k]) - m);
  });
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  sum_exp[row] = s;
  const int32_t target = targets[row];
  const int64_t col = int64_t(target) - vocab_start;  // negative for ignored rows (-1)
  float picked = target >= 0 && col >= 0 && col < valid ? to_f32(x[col]) : 0.0f;
  if (is_bad_target(target, vocab_start, valid, cols)) picked = CUDART_NAN_F;
  target_logit[row] = picked;
}

// Forward only: one thread per row.
__global__ void loss_kernel(const int32_t* __restrict__ targets, int64_t rows, int cols, int valid, int64_t vocab_start,
                            const float* __restrict__ row_max, const float* __restrict__ sum_exp,
                            const float* __restrict__ target_logit, float* __restrict__ losses) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= rows) return;
  const int32_t target = targets[n];
  losses[n] =
      row_loss(target, is_bad_target(target, vocab_start, valid, cols), row_max[n], sum_exp[n], target_logit[n]);
}

// Backward: losses, and logits[n, :] <- dlogits in place (see the header); an ignored row turns
// zero, a bad target's row NaN.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    loss_gradient_kernel(T* logits, const int32_t* __restrict__ targets, int cols, int valid, int64_t vocab_start,
                         const float* __restrict__ row_max, const float* __restrict__ sum_exp,
                         const float* __restrict__ target_logit, float grad_scale, float* __restrict__ losses) {
  constexpr int P = Pack128<T>::size;
  const int64_t row = blockIdx.x;
  T* x = logits + row * cols;
  const int32_t target = targets[row];
  const bool bad = is_bad_target(target, vocab_start, valid, cols);
  const float max = row_max[row], sum = sum_exp[row];
  if (threadIdx.x == 0) losses[row] = row_loss(target, bad, max, sum, target_logit[row]);

  // Packs with no gradient to compute: the whole row of an ignored row or a bad target, else
  // the packs past the last valid column.
  Pack128<T> fill;
#pragma unroll
  for (int k = 0; k < P; ++k) fill[k] = from_f32<T>(bad ? CUDART_NAN_F : 0.0f);
  const int first_fill = target == -1 || bad ? 0 : packs_of<T>(valid);
  for (int i = first_fill + threadIdx.x; i < cols / P; i += kThreads) store128cs(x + i * P, fill);
  if (first_fill == 0) return;  // nothing left (also when valid == 0: the shard is all padding)

  const float log_sum = logf(sum);
  const int64_t target_col = int64_t(target) - vocab_start;  // outside [0, valid): another rank's
  for_each_pack(x, packs_of<T>(valid), [&](const Pack128<T>& p, int col) {
    Pack128<T> g;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float prob = __expf(to_f32(p[k]) - max - log_sum);
      const float d = (prob - (col + k == target_col ? 1.0f : 0.0f)) * grad_scale;
      g[k] = from_f32<T>(col + k < valid ? d : 0.0f);
    }
    store128cs(x + col, g);
  });
}

// What every kernel here needs of logits: rows of whole 16-byte packs, 16-byte aligned.
template <typename T>
void expect_packed_rows(const char* op, const Tensor& logits) {
  const int64_t cols = logits.dim(1);
  TROUPE_CHECK(cols % Pack128<T>::size == 0, op, ": the CUDA kernel needs Vl to be a multiple of ", Pack128<T>::size,
               ", got logits ", logits.str());
  TROUPE_CHECK(cols <= INT_MAX, op, ": Vl = ", cols, " is too large");
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(logits.data()) % 16 == 0, op,
               ": the CUDA kernel needs logits 16-byte aligned (a slice at an odd offset?), got ", logits.str());
}

}  // namespace

void vocab_parallel_max(const Context& ctx, const Tensor& logits, int64_t valid, const Tensor& row_max) {
  constexpr const char* op = "vocab_parallel_max";
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    expect_packed_rows<T>(op, logits);
    const int64_t rows = logits.dim(0);
    if (rows == 0) return;
    max_kernel<T><<<unsigned(rows), kThreads, 0, stream_of(ctx)>>>(logits.data_as<T>(), int(logits.dim(1)), int(valid),
                                                                   row_max.data_as<float>());
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_sum_exp(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit) {
  constexpr const char* op = "vocab_parallel_sum_exp";
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    expect_packed_rows<T>(op, logits);
    const int64_t rows = logits.dim(0);
    if (rows == 0) return;
    sum_exp_kernel<T><<<unsigned(rows), kThreads, 0, stream_of(ctx)>>>(
        logits.data_as<T>(), targets.data_as<int32_t>(), int(logits.dim(1)), int(valid), vocab_start,
        row_max.data_as<float>(), sum_exp.data_as<float>(), target_logit.data_as<float>());
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_loss(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                         int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         float grad_scale, bool backward, const Tensor& losses) {
  constexpr const char* op = "vocab_parallel_loss";
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    expect_packed_rows<T>(op, logits);
    const int64_t rows = logits.dim(0);
    if (rows == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    if (backward) {
      loss_gradient_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(
          logits.data_as<T>(), targets.data_as<int32_t>(), int(logits.dim(1)), int(valid), vocab_start,
          row_max.data_as<float>(), sum_exp.data_as<float>(), target_logit.data_as<float>(), grad_scale,
          losses.data_as<float>());
    } else {
      loss_kernel<<<ceil_div(rows, kThreads), kThreads, 0, stream>>>(
          targets.data_as<int32_t>(), rows, int(logits.dim(1)), int(valid), vocab_start, row_max.data_as<float>(),
          sum_exp.data_as<float>(), target_logit.data_as<float>(), losses.data_as<float>());
    }
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
