// make_grad_buckets under expert parallelism with the distributed optimizer: ParamLayout pads
// each MoE layer's run of routed experts to the optimizer's multiple, and the buckets are cut at
// those runs, the ones inside marked `expert` (reduced and sharded over the expert-data-parallel
// group); every element lies in exactly one bucket, each a whole number of shards.
#include <gtest/gtest.h>

#include "actors/train/stage_worker.hpp"
#include "tests/actors/train/moe_test_model.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using Runs = std::vector<std::pair<int64_t, int64_t>>;

bool inside(const Runs& runs, int64_t begin, int64_t end) {
  for (const auto& [lo, hi] : runs)
    if (lo <= begin && end <= hi) return true;
  return false;
}

TEST(GradBuckets, CutAtTheRoutedExpertsRuns) {
  GptConfig c = tiny_model(true);
  set_test_moe(c.moe, 0.0, true);
  const int64_t multiple = 64 * 4;  // the distributed optimizer over 4 data ranks
  const ParamLayout layout(c, ChunkSpec::whole_model(), {}, {.rank = 1, .size = 2}, multiple);
  const Runs runs = layout.expert_runs();
  ASSERT_EQ(runs.size(), 6u);  // one per MoE layer of ([1]*3+[0])*2
  for (const auto& [lo, hi] : runs) {
    EXPECT_EQ(lo % multiple, 0);
    EXPECT_EQ(hi % multiple, 0);
  }
  for (const ParamInfo& p : layout.params())
    EXPECT_EQ(inside(runs, p.offset, p.offset + p.numel()), ParamLayout::is_expert_param(p.name)) << p.name;

  const int64_t n = (layout.size() + multiple - 1) / multiple * multiple;
  const std::vector<actors::GradBucket> buckets = actors::make_grad_buckets({n}, 3000, multiple, {runs});
  int64_t at = 0, expert_buckets = 0;
  for (const actors::GradBucket& b : buckets) {
    EXPECT_EQ(b.begin, at);
    EXPECT_EQ((b.end - b.begin) % multiple, 0);
    EXPECT_EQ(b.expert, inside(runs, b.begin, b.end)) << "[" << b.begin << ", " << b.end << ")";
    expert_buckets += b.expert;
    at = b.end;
  }
  EXPECT_EQ(at, n);
  EXPECT_GE(expert_buckets, int64_t(runs.size()));
  // Without expert runs nothing is marked; a run off the multiple is refused.
  for (const actors::GradBucket& b : actors::make_grad_buckets({n}, 3000, multiple)) EXPECT_FALSE(b.expert);
  EXPECT_THROW(actors::make_grad_buckets({n}, 3000, multiple, {Runs{{64, 2 * multiple}}}), Error);
}

}  // namespace
}  // namespace troupe::test
