// kernels/linear_fused.hpp on cuBLASLt: each fusion is one matmul_lt with an epilogue.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/linear_fused.hpp"

namespace troupe::cuda {

void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y) {
  MatmulProblem p{&x, false, &w, true, &y, 0.0f, MatmulEpilogue::gelu_aux, b.defined() ? &b : nullptr};
  p.aux = &pre;
  matmul_lt(ctx, p);
}

void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre) {
  MatmulProblem p{&dy, false, &w, false, &dpre, 0.0f, MatmulEpilogue::dgelu};
  p.aux = &pre;
  matmul_lt(ctx, p);
}

void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y) {
  MatmulProblem p{&x,
                  false,
                  &w,
                  true,
                  &y,
                  0.0f,
                  b.defined() ? MatmulEpilogue::bias : MatmulEpilogue::none,
                  b.defined() ? &b : nullptr};
  p.c = &residual;
  matmul_lt(ctx, p);
}

}  // namespace troupe::cuda
