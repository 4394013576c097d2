#include "kernels/context_lanes.hpp"

#include "base/check.hpp"
#include "kernels/dispatch.hpp"

namespace troupe {

ContextLanes::ContextLanes(const Context& ctx) : ctx_(ctx) {
  if (ctx.is_cuda()) other_ = std::make_unique<Context>(Context::cuda(ctx.device_index()));
}

ContextLanes::~ContextLanes() {
  try {
    use(0);
  } catch (...) {
    // Trading pointers does not fail; nothing to report from a destructor.
  }
}

void ContextLanes::use(int lane) {
  TROUPE_CHECK(lane == 0 || lane == 1, "ContextLanes: lane ", lane, " (0 or 1)");
  if (lane == lane_) return;
  if (other_) TROUPE_ON_CUDA(cuda::trade_streams(ctx_, *other_));
  lane_ = lane;
}

}  // namespace troupe
