// Training's GEMM fusions (kernels/linear.hpp's layer with its neighbour folded in): the GELU
// into fc1's GEMM and its backward into the GEMM that makes fc2's input gradient, and the
// residual add into the GEMM that ends a branch. Each saves a pass over an [M, N] activation.
//
//   linear_gelu_aux_forward(ctx, ln2, fc1_w, fc1_b, pre, act);      // pre = ln2 fc1^T + b, act = gelu(pre)
//   linear_residual_forward(ctx, act, fc2_w, fc2_b, x_mid, y);      // y = x_mid + act fc2^T + b
//   linear_backward(ctx, dy, act, fc2_w, Tensor(), dfc2_w, dfc2_b);  // fc2's weight gradients
//   linear_input_grad_dgelu(ctx, dy, fc2_w, pre, dpre, dfc1_b);     // dpre = (dy fc2) * gelu'(pre), dfc1_b += sums
//
// CUDA: one cuBLASLt GEMM each (epilogues GELU_AUX(_BIAS), DGELU, and C = residual), where the
// GELU epilogues can run (16-bit types, the GELU's width a multiple of 8), else the two steps.
// The epilogue applies the GELU to the f32 accumulator before rounding, so it differs from the
// two steps by bf16 rounding only. CPU: the two steps, bit-identical to calling them in turn.
//
// The input gradient through the GELU has two CUDA paths, and the faster depends on the shape:
// cuBLASLt's DGELU epilogue (then db's column sums apart), or a plain GEMM followed by the GELU's
// backward kernel, which sums db in the same pass. So the path is measured the first time a
// shape comes (both timed on the stream, the epilogue kept unless the other is at least 3%
// faster) and remembered for the process. TROUPE_MLP_DGELU=epilogue|apart fixes it instead, and
// so does --deterministic-mode (the epilogue): runs that repeat bit for bit. The epilogue's
// algorithm is searched at first use (cuda::matmul_lt_searched): on an H100 the heuristic's
// takes 0.71-0.86 ms at GPT-2 350M's shape (M 32768, K 4096, N 1024), the searched 0.44-0.46,
// against 0.70 apart; at 124M's (M 65536, K 3072, N 768) the epilogue wins either way.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// x [M, K]; w [N, K]; b [N] or undefined; pre, y [M, N]: pre = x w^T + b, y = gelu(pre) (tanh).
void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y);
// dy [M, N]; w [N, K]; pre, dpre [M, K]: dpre = (dy w) * gelu'(pre) (overwritten); db, if
// defined (f32 [K]: the bias gradient of the linear layer that made pre), += dpre's column sums.
void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre, const Tensor& db = Tensor());
// x [M, K]; w [N, K]; b [N] or undefined; residual, y [M, N], apart: y = residual + (x w^T + b).
void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y);

namespace cuda {
// The CUDA path of linear_input_grad_dgelu (above): measured per shape, or fixed.
enum class DgeluPath { measured, epilogue, apart };
// The path TROUPE_MLP_DGELU names (epilogue | apart | measure; unset: measured); refuses others.
DgeluPath dgelu_path_from_env();
// Fixes the path for the whole process while it lives (TROUPE_MLP_DGELU, when it names a fixed
// path, still wins): --deterministic-mode takes the epilogue, so a run does not depend on a
// timing. Restores the previous override.
class ScopedDgeluPath {
 public:
  explicit ScopedDgeluPath(DgeluPath path);
  ~ScopedDgeluPath();
  ScopedDgeluPath(const ScopedDgeluPath&) = delete;
  ScopedDgeluPath& operator=(const ScopedDgeluPath&) = delete;

 private:
  int previous_;
};

void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y);
void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre, const Tensor& db);
void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y);
}  // namespace cuda

}  // namespace troupe
