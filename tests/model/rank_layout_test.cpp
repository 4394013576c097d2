// The rank layout against Megatron-LM's: the groups its parallel_state docstring lists for
// 16 GPUs with TP 2 and PP 4, the `tp-cp-ep-dp-pp` order with every dimension, the expert grid.
#include <gtest/gtest.h>

#include "base/check.hpp"
#include "model/rank_layout.hpp"

namespace troupe {
namespace {

using Ranks = std::vector<int>;

TEST(RankLayout, MegatronsSixteenGpuExample) {
  const RankLayout L{.tensor = 2, .data = 2, .pipeline = 4};
  L.validate();
  ASSERT_EQ(L.world(), 16);
  // "8 tensor model-parallel groups: [g0, g1], [g2, g3], ..."
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(L.tensor_group(2 * g), (Ranks{2 * g, 2 * g + 1}));
    EXPECT_EQ(L.tensor_group(2 * g + 1), (Ranks{2 * g, 2 * g + 1}));
  }
  // "8 data-parallel groups: [g0, g2], [g1, g3], [g4, g6], [g5, g7], ..."
  EXPECT_EQ(L.data_group(0), (Ranks{0, 2}));
  EXPECT_EQ(L.data_group(3), (Ranks{1, 3}));
  EXPECT_EQ(L.data_group(6), (Ranks{4, 6}));
  EXPECT_EQ(L.data_group(13), (Ranks{13, 15}));
  // "4 pipeline model-parallel groups: [g0, g4, g8, g12], [g1, g5, g9, g13], ..."
  EXPECT_EQ(L.pipeline_group(9), (Ranks{1, 5, 9, 13}));
  EXPECT_EQ(L.pipeline_group(14), (Ranks{2, 6, 10, 14}));
  EXPECT_EQ(L.pipeline_next(9), 13);
  EXPECT_EQ(L.pipeline_next(13), 1);  // wraps (interleaved schedules)
  EXPECT_EQ(L.pipeline_prev(1), 13);
}

TEST(RankLayout, TensorFastestThenContextDataPipeline) {
  const RankLayout L{.tensor = 2, .context = 3, .data = 2, .pipeline = 2};
  L.validate();
  int expected = 0;
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int cp = 0; cp < 3; ++cp)
        for (int tp = 0; tp < 2; ++tp) {
          const RankCoord c{.pp = pp, .dp = dp, .cp = cp, .tp = tp};
          EXPECT_EQ(L.rank(c), expected);
          EXPECT_EQ(L.coord(expected), c);
          ++expected;
        }
  EXPECT_EQ(L.context_group(L.rank({.pp = 1, .dp = 1, .cp = 2, .tp = 1})), (Ranks{19, 21, 23}));
  EXPECT_EQ(L.data_group(L.rank({.pp = 0, .dp = 0, .cp = 1, .tp = 0})), (Ranks{2, 8}));
}

TEST(RankLayout, TheRunsStageOrderIsUnchanged) {
  // The stage actors were indexed tp + T * (dp + D * stage) before the layout existed.
  const RankLayout L{.tensor = 2, .data = 4, .pipeline = 3};
  for (int s = 0; s < 3; ++s)
    for (int dp = 0; dp < 4; ++dp)
      for (int tp = 0; tp < 2; ++tp) EXPECT_EQ(L.rank({.pp = s, .dp = dp, .tp = tp}), tp + 2 * (dp + 4 * s));
}

TEST(RankLayout, ExpertGridIsCarvedOutOfTheDataRanks) {
  // 8 ranks of one stage, EP 4: expert groups {0..3} and {4..7}; with expert TP 2, the expert
  // group of rank 5 is the ranks with its expert tensor rank and expert data rank.
  const RankLayout L{.data = 8, .expert = 4};
  L.validate();
  EXPECT_EQ(L.expert_group(2), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(L.expert_group(6), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(L.expert_coord(6), (ExpertRankCoord{.pp = 0, .edp = 1, .ep = 2, .etp = 0}));
  const RankLayout M{.tensor = 2, .data = 4, .pipeline = 2, .expert = 2, .expert_tensor = 2};
  M.validate();
  EXPECT_EQ(M.expert_group(13), (Ranks{13, 15}));  // stage 1: ranks 8..15; etp 1, edp 1
  EXPECT_EQ(M.expert_coord(13), (ExpertRankCoord{.pp = 1, .edp = 1, .ep = 0, .etp = 1}));
}

// Under context parallelism the expert groups are runs of the data x context ranks (context
// fastest); evaluation runs on the fewest leading data ranks that hold whole expert groups.
TEST(RankLayout, ExpertGroupsAcrossContextRanks) {
  const RankLayout cp2_ep2{.context = 2, .data = 2, .expert = 2};  // ranks (dp, cp): 0 (0,0) 1 (0,1) 2 (1,0) 3 (1,1)
  EXPECT_EQ(cp2_ep2.expert_group(1), (Ranks{0, 1}));               // the context ranks of data rank 0
  EXPECT_EQ(cp2_ep2.expert_group(3), (Ranks{2, 3}));
  EXPECT_EQ(cp2_ep2.expert_group_data_ranks(), 1);
  const RankLayout cp2_ep4{.context = 2, .data = 2, .expert = 4};
  EXPECT_EQ(cp2_ep4.expert_group(2), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(cp2_ep4.expert_group_data_ranks(), 2);
  EXPECT_EQ(
      (RankLayout{.tensor = 2, .context = 2, .data = 3, .expert = 3, .expert_tensor = 2}).expert_group_data_ranks(),
      3);  // groups of 3 over data ranks of 2 context ranks: lcm(3, 2) / 2
  EXPECT_EQ((RankLayout{.data = 4, .expert = 2}).expert_group_data_ranks(), 2);  // no context parallelism: EP
  EXPECT_EQ((RankLayout{.data = 4}).expert_group_data_ranks(), 1);
  // The context ring and the expert group join into one op order.
  EXPECT_EQ(cp2_ep4.order_group(3), (Ranks{0, 1, 2, 3}));
}

// The ranks that must run one op order: joined by the tensor, context and expert groups.
TEST(RankLayout, OrderGroupJoinsTheGroupsAnOpsCollectivesSpan) {
  const RankLayout tp_cp{.tensor = 2, .context = 2, .data = 2, .pipeline = 2};
  EXPECT_EQ(tp_cp.order_group(13), (Ranks{12, 13, 14, 15}));  // stage 1, data rank 1
  const RankLayout ep_pp{.data = 4, .pipeline = 2, .expert = 2};
  EXPECT_EQ(ep_pp.order_group(0), (Ranks{0, 1}));
  EXPECT_EQ(ep_pp.order_group(7), (Ranks{6, 7}));                 // stage 1, the second expert group
  EXPECT_EQ((RankLayout{.data = 4}).order_group(2), (Ranks{2}));  // plain data parallelism: alone
  // Expert groups of 4 over tensor groups of 2 and 4 data ranks: the expert groups join pairs
  // of tensor groups.
  const RankLayout ep_tp{.tensor = 2, .data = 4, .expert = 4};
  EXPECT_EQ(ep_tp.order_group(5), (Ranks{4, 5, 6, 7}));
  // Tensor groups of 2 and expert groups of 3 overlap into one group of all 6.
  EXPECT_EQ((RankLayout{.tensor = 2, .data = 3, .expert = 3}).order_group(5), (Ranks{0, 1, 2, 3, 4, 5}));
}

TEST(RankLayout, NamesAndErrors) {
  EXPECT_EQ((RankLayout{.pipeline = 4}).stage_name(2), "stage 2");
  EXPECT_EQ((RankLayout{.tensor = 2, .data = 2, .pipeline = 2}).stage_name(7), "stage 1 (tensor rank 1, data rank 1)");
  EXPECT_EQ((RankLayout{.tensor = 2, .context = 2}).stage_name(3),
            "stage 0 (tensor rank 1, data rank 0, context rank 1)");
  EXPECT_THROW((RankLayout{.tensor = 0}).validate(), Error);
  EXPECT_THROW((RankLayout{.data = 6, .expert = 4}).validate(), Error);
  EXPECT_THROW((RankLayout{.tensor = 2}).coord(2), Error);
  EXPECT_THROW((RankLayout{.tensor = 2}).rank({.tp = 2}), Error);
}

}  // namespace
}  // namespace troupe
