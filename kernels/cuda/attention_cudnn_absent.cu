// The cuDNN attention entry points of a build without cuDNN (kernels/CMakeLists.txt compiles this
// file instead of attention_cudnn*.cu): nothing is covered, so attention runs Troupe's kernels;
// attention_backend() already refuses TROUPE_ATTENTION_BACKEND=cudnn in such a build.
#include "base/check.hpp"
#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/cuda_state.cuh"

namespace troupe {

void CudnnStateDeleter::operator()(CudnnState* s) const noexcept { (void)s; }  // never made

namespace cuda {

int cudnn_runtime_version() { return 0; }
int cudnn_min_attention_version() { return 0; }

bool cudnn_attention_supports(const Context&, const Tensor&, const AttentionConfig&,
                              std::initializer_list<const Tensor*>, bool) {
  return false;
}

void cudnn_attention_forward(const Context&, const Tensor&, const AttentionConfig&, const Tensor&, const Tensor&) {
  TROUPE_FAIL("cudnn_attention_forward: this build has no cuDNN");
}

void cudnn_attention_backward(const Context&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const AttentionConfig&, const Tensor&, bool) {
  TROUPE_FAIL("cudnn_attention_backward: this build has no cuDNN");
}

bool cudnn_attention_block_supports(const Context&, const Tensor&, const Tensor&, const AttentionConfig&,
                                    std::initializer_list<const Tensor*>, bool) {
  return false;
}

void cudnn_attention_block_forward(const Context&, const Tensor&, const Tensor&, const AttentionConfig&, BlockMask,
                                   const Tensor&, const Tensor&) {
  TROUPE_FAIL("cudnn_attention_block_forward: this build has no cuDNN");
}

void cudnn_attention_block_backward(const Context&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, const AttentionConfig&, BlockMask, const Tensor&, const Tensor&,
                                    bool) {
  TROUPE_FAIL("cudnn_attention_block_backward: this build has no cuDNN");
}

}  // namespace cuda
}  // namespace troupe
