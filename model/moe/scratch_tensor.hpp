// A temporary of one MoE op (a gradient between two steps of a backward, an f32 copy of the
// input): on CUDA stream-ordered memory (kernels/cuda/moe_scratch.hpp), released in stream order
// when it goes out of scope, so the op costs no device synchronization (a Tensor's cudaFree
// would wait for the GPU); on the CPU a plain host tensor. Only for tensors that die with the
// op and are used on ctx's stream alone: what a microbatch keeps for its backward stays a Tensor.
//
//   ScratchTensor dh(ctx, x.dtype(), {rows, f1});
//   swiglu_backward(ctx, dact, h, dh);   // converts to const Tensor&
#pragma once

#include "kernels/context.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

class ScratchTensor {
 public:
  ScratchTensor(const Context& ctx, DType dtype, Shape shape);
  ~ScratchTensor();
  ScratchTensor(const ScratchTensor&) = delete;
  ScratchTensor& operator=(const ScratchTensor&) = delete;

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT(google-explicit-constructor): used as the op's Tensor

 private:
  const Context& ctx_;
  void* device_ptr_ = nullptr;  // stream-ordered memory to release; null on the CPU
  Tensor tensor_;
};

}  // namespace troupe
