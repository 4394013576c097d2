// Linear layer on CUDA: three cuBLASLt GEMMs (kernels/cuda/gemm_lt.hpp) and a column-sum
// kernel for the bias gradient. The forwards of a decode step (at most 8 rows, bf16/f16) take
// the small-batch GEMV instead (kernels/cuda/gemv.hpp), unless TROUPE_DECODE_GEMV=0.
//
// db is our own two-pass column sum rather than cuBLASLt's BGRADB epilogue on the dw GEMM:
// measured by bench/gemm_bench on an H200 (GPT-2 shapes, M = 16384), the epilogue slows that
// GEMM by 30-40% (qkv: 0.127 vs 0.090 ms) while the column sum costs 0.016 ms; the epilogue
// also overwrites where db must accumulate. The fixed reduction order keeps db deterministic.
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/linear.hpp"

namespace troupe::cuda {

namespace {

// The matrix a bias gradient sums: dy itself, kVec elements at a time (16-byte packs where
// the columns allow).
template <typename T, int kVec>
struct ReadColumns {
  const T* __restrict__ dy;
  __device__ void operator()(int64_t i, float (&v)[kVec]) const {
    if constexpr (kVec == Pack128<T>::size) {
      const Pack128<T> p = load128cs(dy + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = to_f32(p[k]);
    } else {
      v[0] = to_f32(dy[i]);
    }
  }
};

// db[N] += column sums of dy[M, N] (kernels/cuda/column_sum.cuh).
template <typename T>
void bias_grad_of(const Context& ctx, const Tensor& dy, const Tensor& db) {
  constexpr int kPack = Pack128<T>::size;
  const int64_t rows = dy.dim(0), cols = dy.dim(1);
  const bool packed = cols % kPack == 0 && reinterpret_cast<uintptr_t>(dy.data()) % 16 == 0;
  if (packed)
    column_sums<kPack>(ctx, "linear_backward", ReadColumns<T, kPack>{dy.data_as<T>()}, rows, cols, db.data_as<float>());
  else
    column_sums<1>(ctx, "linear_backward", ReadColumns<T, 1>{dy.data_as<T>()}, rows, cols, db.data_as<float>());
}

}  // namespace

void linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    bool accumulate) {
  if (gemv_applies(x, w, y)) {
    gemv_forward(ctx, x, w, b, y, accumulate, /*gelu=*/false);
    return;
  }
  // y[M, N] = x[M, K] · w[N, K]^T (+ y when accumulating, beta = 1) (+ b[N] in the epilogue)
  MatmulProblem p{&x, false, &w, true, &y, accumulate ? 1.0f : 0.0f};
  if (b.defined()) {
    p.epilogue = MatmulEpilogue::bias;
    p.vec = &b;
  }
  matmul_lt(ctx, p);
}

void linear_gelu_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  if (gemv_applies(x, w, y)) {
    gemv_forward(ctx, x, w, b, y, /*accumulate=*/false, /*gelu=*/true);
    return;
  }
  MatmulProblem p{&x, false, &w, true, &y, 0.0f, MatmulEpilogue::gelu};
  if (b.defined()) p.vec = &b;
  matmul_lt(ctx, p);
}

void linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                     const Tensor& dw, const Tensor& db, bool accumulate_dx) {
  // dx[M, K] = dy[M, N] · w[N, K]  (+ dx)
  if (dx.defined()) matmul_lt(ctx, {&dy, false, &w, false, &dx, accumulate_dx ? 1.0f : 0.0f});
  // dw[N, K] += dy^T · x[M, K], f32 output; with no rows there is nothing to add.
  if (dw.defined() && x.dim(0) > 0) matmul_lt(ctx, {&dy, true, &x, false, &dw, 1.0f});
  if (db.defined()) bias_grad_accumulate(ctx, dy, db);
}

void bias_grad_accumulate(const Context& ctx, const Tensor& dy, const Tensor& db) {
  dispatch_float(dy.dtype(), "linear_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_of<T>(ctx, dy, db);
  });
}

}  // namespace troupe::cuda
