#include "model/moe/scratch_tensor.hpp"

namespace troupe {

ScratchTensor::ScratchTensor(const Context& ctx, DType dtype, Shape shape)
    : tensor_(Tensor::stream_ordered(ctx, dtype, std::move(shape))) {}

}  // namespace troupe
