// A temporary of one MoE op (a gradient between two steps of a backward, an f32 copy of the
// input): a Tensor::stream_ordered one, released in stream order when it goes out of scope, so
// the op costs no device synchronization (a cudaMalloc'ed Tensor's cudaFree would wait for the
// GPU); on the CPU a plain host tensor. For tensors that die with the op, used on ctx's stream
// (or on another one fenced before ctx's later work). Not copyable: nothing keeps it past the op.
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
  ScratchTensor(const ScratchTensor&) = delete;
  ScratchTensor& operator=(const ScratchTensor&) = delete;

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT(google-explicit-constructor): used as the op's Tensor

 private:
  Tensor tensor_;
};

}  // namespace troupe
