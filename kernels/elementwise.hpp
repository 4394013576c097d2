// Small pointwise ops the model glues layers with.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// out = a + b (same shape and dtype; out may alias a or b). The residual connection.
void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
// x *= s.
void scale_inplace(const Context& ctx, const Tensor& x, float s);
// dst = src converted between f32 / bf16 / f16 (same numel; round to nearest even).
void convert(const Context& ctx, const Tensor& src, const Tensor& dst);

namespace cpu {
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void scale_inplace(const Tensor& x, float s);
void convert(const Tensor& src, const Tensor& dst);
}  // namespace cpu
namespace cuda {
void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void scale_inplace(const Context& ctx, const Tensor& x, float s);
void convert(const Context& ctx, const Tensor& src, const Tensor& dst);
}  // namespace cuda

}  // namespace troupe
