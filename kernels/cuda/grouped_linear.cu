// Grouped linear on CUDA. y and dx: one cublasGemmGroupedBatchedEx launch over every non-empty
// group (cuBLAS 12.5+), each group its own problem (its row count differs), the matrices' row
// slices given as device pointer arrays. dw: cuBLASLt GEMMs one group after another, because the
// grouped GEMM supports bf16/f16 inputs only with an output of the same type, and the weight
// gradient must accumulate in f32; each group's dw GEMM is [N, K] over its rows, large enough
// to fill the GPU by itself at model sizes.
//
// Row-major Y[m, N] = X[m, K] W[N, K]^T is column-major Y^T = W^T X^T: cuBLAS's A is our W
// (read transposed), its B our X, its m = N, n = m (rows), k = K. Likewise dX = dY W is
// dX^T = W^T dY^T with cuBLAS's A = W (not transposed), B = dY, m = K, n = rows, k = N.
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/grouped_linear.hpp"

#if CUBLAS_VERSION >= 120500
#define TROUPE_HAVE_GROUPED_GEMM 1
#else
#define TROUPE_HAVE_GROUPED_GEMM 0
#endif

namespace troupe::cuda {

namespace {

Tensor rows(const Tensor& t, int64_t from, int64_t to) { return t.slice(from * t.dim(1), {to - from, t.dim(1)}); }
Tensor group(const Tensor& w, int64_t g) { return w.slice(g * w.dim(1) * w.dim(2), {w.dim(1), w.dim(2)}); }

// One problem per non-empty group: C_g = op(A_g) B_g, A_g = w[g] [N, K] (row-major), B_g and C_g
// row slices of the activations.
struct GroupedProblem {
  bool trans_w;  // forward: W^T (cuBLAS op T); dx: W (op N)
  int64_t m, k;  // cuBLAS m and k, the same for every group
  int64_t ld_b, ld_c;
  const Tensor* w;  // [G, N, K]
  const Tensor* b;  // [R, ld_b]
  const Tensor* c;  // [R, ld_c]
};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Returns false (nothing enqueued) where the grouped GEMM cannot take the problem: an old
// cuBLAS, or row slices off 16-byte alignment (odd widths), which the per-group path handles.
bool grouped_gemm(const Context& ctx, const GroupedProblem& p, const std::vector<int64_t>& offsets) {
#if TROUPE_HAVE_GROUPED_GEMM
  const int64_t groups = p.w->dim(0), width = p.w->dim(1) * p.w->dim(2);
  const size_t elem = dtype_size(p.b->dtype());
  std::vector<const void*> a_ptrs, b_ptrs;
  std::vector<void*> c_ptrs;
  std::vector<int> n_array;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    a_ptrs.push_back(static_cast<const char*>(p.w->data()) + size_t(g * width) * elem);
    b_ptrs.push_back(static_cast<const char*>(p.b->data()) + size_t(from * p.ld_b) * elem);
    c_ptrs.push_back(static_cast<char*>(p.c->data()) + size_t(from * p.ld_c) * elem);
    n_array.push_back(int(to - from));
    if (!aligned16(a_ptrs.back()) || !aligned16(b_ptrs.back()) || !aligned16(c_ptrs.back())) return false;
  }
  const int count = int(n_array.size());
  if (count == 0) return true;
  for (int64_t v : {p.m, p.k, p.ld_b, p.ld_c, offsets.back()})
    if (v > INT32_MAX) return false;
  cudaStream_t stream = stream_of(ctx);
  // The pointer arrays live in device memory; the copies are from pageable host memory, which
  // cudaMemcpyAsync stages before it returns.
  StreamBuffer<void*> ptrs(stream, size_t(3 * count));
  TROUPE_CUDA_CHECK(
      cudaMemcpyAsync(ptrs.get(), a_ptrs.data(), size_t(count) * sizeof(void*), cudaMemcpyHostToDevice, stream));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(ptrs.get() + count, b_ptrs.data(), size_t(count) * sizeof(void*),
                                    cudaMemcpyHostToDevice, stream));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(ptrs.get() + 2 * count, c_ptrs.data(), size_t(count) * sizeof(void*),
                                    cudaMemcpyHostToDevice, stream));
  const std::vector<cublasOperation_t> trans_a(size_t(count), p.trans_w ? CUBLAS_OP_T : CUBLAS_OP_N),
      trans_b(size_t(count), CUBLAS_OP_N);
  const std::vector<int> m_array(size_t(count), int(p.m)), k_array(size_t(count), int(p.k)),
      lda(size_t(count), int(p.w->dim(2))), ldb(size_t(count), int(p.ld_b)), ldc(size_t(count), int(p.ld_c)),
      group_size(size_t(count), 1);
  const std::vector<float> alpha(size_t(count), 1.0f), beta(size_t(count), 0.0f);
  const cudaDataType_t type = blas_data_type(p.b->dtype(), "grouped_linear");
  // CUBLAS_COMPUTE_32F: f32 accumulation; on f32 inputs full FP32 (the handle's default math
  // mode allows no TF32), as linear_forward's f32 path.
  TROUPE_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      ctx.cuda_state().blas, trans_a.data(), trans_b.data(), m_array.data(), n_array.data(), k_array.data(),
      alpha.data(), const_cast<const void* const*>(ptrs.get()), type, lda.data(),
      const_cast<const void* const*>(ptrs.get() + count), type, ldb.data(), beta.data(), ptrs.get() + 2 * count, type,
      ldc.data(), count, group_size.data(), CUBLAS_COMPUTE_32F));
  return true;
#else
  (void)ctx, (void)p, (void)offsets;
  return false;
#endif
}

}  // namespace

void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                            const Tensor& y) {
  const int64_t n = w.dim(1), k = w.dim(2);
  if (grouped_gemm(ctx, {true, n, k, k, n, &w, &x, &y}, offsets)) return;
  for (int64_t g = 0; g < w.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    const Tensor xg = rows(x, from, to), wg = group(w, g), yg = rows(y, from, to);
    matmul_lt(ctx, {&xg, false, &wg, true, &yg, 0.0f});
  }
}

void grouped_linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const std::vector<int64_t>& offsets, const Tensor& dx, const Tensor& dw) {
  const int64_t n = w.dim(1), k = w.dim(2);
  const bool dx_done = !dx.defined() || grouped_gemm(ctx, {false, k, n, n, k, &w, &dy, &dx}, offsets);
  for (int64_t g = 0; g < w.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    const Tensor dyg = rows(dy, from, to), xg = rows(x, from, to), wg = group(w, g), dwg = group(dw, g);
    if (!dx_done) {
      const Tensor dxg = rows(dx, from, to);
      matmul_lt(ctx, {&dyg, false, &wg, false, &dxg, 0.0f});  // dx_g = dy_g w_g
    }
    matmul_lt(ctx, {&dyg, true, &xg, false, &dwg, 1.0f});  // dw_g += dy_g^T x_g (f32)
  }
}

}  // namespace troupe::cuda
