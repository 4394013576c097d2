// ContextLanes (kernels/context_lanes.hpp) on a CPU context, where work has run when its call
// returns: the lanes only record which one is in use, and refuse any but 0 and 1.
#include <gtest/gtest.h>

#include "base/check.hpp"
#include "kernels/context_lanes.hpp"

namespace troupe {
namespace {

TEST(ContextLanes, CpuContextRecordsTheLane) {
  const Context ctx = Context::cpu();
  ContextLanes lanes(ctx);
  EXPECT_EQ(lanes.lane(), 0);
  lanes.use(1);
  EXPECT_EQ(lanes.lane(), 1);
  EXPECT_EQ(&lanes.context(), &ctx);
  EXPECT_THROW(lanes.use(-1), Error);
  EXPECT_EQ(lanes.lane(), 1);
  lanes.use(0);
  EXPECT_EQ(lanes.lane(), 0);
}

}  // namespace
}  // namespace troupe
