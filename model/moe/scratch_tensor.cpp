#include "model/moe/scratch_tensor.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/moe_scratch.hpp"
#endif

namespace troupe {

ScratchTensor::ScratchTensor(const Context& ctx, DType dtype, Shape shape) : ctx_(ctx) {
#if TROUPE_HAVE_CUDA
  if (ctx.is_cuda()) {
    device_ptr_ = cuda::moe_stream_alloc(ctx, size_t(shape_numel(shape)) * dtype_size(dtype));
    tensor_ = Tensor::wrap(device_ptr_, dtype, std::move(shape), DeviceKind::cuda, ctx.device_index());
    return;
  }
#endif
  tensor_ = Tensor::empty(ctx, dtype, std::move(shape));
}

ScratchTensor::~ScratchTensor() {
#if TROUPE_HAVE_CUDA
  cuda::moe_stream_free(ctx_, device_ptr_);
#endif
}

}  // namespace troupe
