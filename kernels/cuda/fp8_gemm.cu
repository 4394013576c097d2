// kernels/fp8_gemm.hpp on cuBLASLt: matmul_lt with fp8 operands and their scale pointers.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/fp8_gemm.hpp"

namespace troupe::cuda {

void fp8_gemm(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta,
              const Tensor& bias) {
  const MatmulFp8 fp8{a.format, b.format, &a.scale_inv, &b.scale_inv};
  MatmulProblem p{&a.data, false, &b.data, true, &d, beta};
  if (bias.defined()) {
    p.epilogue = MatmulEpilogue::bias;
    p.vec = &bias;
  }
  p.fp8 = &fp8;
  matmul_lt(ctx, p);
}

}  // namespace troupe::cuda
