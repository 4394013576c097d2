#include "kernels/fp8_gemm.hpp"

#include <cstdint>

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

constexpr const char* kOp = "fp8_gemm";

void expect_operand(const Context& ctx, const char* arg, const Fp8Operand& x, int64_t k) {
  expect_device(kOp, arg, ctx, x.data);
  expect_dtype(kOp, arg, x.data, DType::u8);
  TROUPE_CHECK(x.data.ndim() == 2 && x.data.dim(1) == k, kOp, ": argument '", arg, "' must be [rows, K = ", k,
               "], got ", x.data.str());
  expect_device(kOp, "scale_inv", ctx, x.scale_inv);
  expect_dtype(kOp, "scale_inv", x.scale_inv, DType::f32);
  expect_shape(kOp, "scale_inv", x.scale_inv, {1});
  // Checked on every backend, so a CPU run refuses what the GPU's cuBLASLt would.
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(x.scale_inv.data()) % 16 == 0, kOp, ": the scale_inv of '", arg,
               "' must be 16-byte aligned (a [T, kFp8ScaleRow] table's column 0), got ", x.scale_inv.str());
}

}  // namespace

void fp8_gemm(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta,
              const Tensor& bias) {
  TROUPE_CHECK(a.data.ndim() == 2, kOp, ": argument 'a' must be [M, K], got ", a.data.str());
  const int64_t m = a.data.dim(0), k = a.data.dim(1);
  expect_operand(ctx, "a", a, k);
  expect_operand(ctx, "b", b, k);
  const int64_t n = b.data.dim(0);
  TROUPE_CHECK(!(a.format == Fp8Format::e5m2 && b.format == Fp8Format::e5m2), kOp,
               ": e5m2 x e5m2 has no FP8 GEMM (cuBLASLt); one operand must be e4m3");
  expect_device(kOp, "d", ctx, d);
  expect_shape(kOp, "d", d, {m, n});
  if (ctx.is_cuda())
    TROUPE_CHECK(is_float(d.dtype()), kOp, ": d must be bf16, f16 or f32 on CUDA, got ", d.str());
  else
    expect_dtype(kOp, "d", d, DType::f32);
  TROUPE_CHECK(beta == 0.0f || (beta == 1.0f && d.dtype() == DType::f32), kOp,
               ": beta must be 0, or 1 with an f32 d, got ", beta, " and ", d.str());
  if (bias.defined()) {
    expect_device(kOp, "bias", ctx, bias);
    expect_dtype(kOp, "bias", bias, d.dtype());
    expect_shape(kOp, "bias", bias, {n});
    TROUPE_CHECK(beta == 0.0f, kOp, ": a bias needs beta 0");
  }
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::fp8_gemm(ctx, a, b, d, beta, bias));
  else
    cpu::fp8_gemm(a, b, d, beta, bias);
}

}  // namespace troupe
