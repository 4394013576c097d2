// A mixture-of-experts model under the actor runtime on CPU devices: PP2 under 1F1B, PP2
// interleaved and DP2 with the distributed optimizer, dropless and with capacity dropping (and PP2
// with selective recompute of attention and the norms; TP2 with and without --sequence-parallel,
// every tensor rank routing the group's tokens, counted once),
// reproduce the single-device Trainer for 10 iterations (pipeline_test_util.hpp's expect_parity:
// loss within 1e-5 relative, grad norm, gathered weights, validation loss) — the routers' aux
// and z losses enter every layout's gradients with the same weight — and report the same
// router statistics (load-balancing loss, expert load).
#include "tests/actors/train/moe_test_model.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Case {
  const char* name;
  int P, V, D;
  double capacity;  // 0: dropless
  bool shared_expert;
  bool recompute_norms = false;  // selective recompute of core_attn and layernorm (MoE layers' ln2 too)
  int T = 1;                     // --tensor-model-parallel-size: every tensor rank routes the same tokens
  bool sp = false;               // --sequence-parallel
};

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(true, c.P, c.V);
  set_test_moe(config.model.moe, c.capacity, c.shared_expert);
  config.parallel.data_size = c.D;
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.sp;
  config.parallel.distributed_optimizer = c.D > 1;
  config.parallel.overlap_grad_reduce = c.D > 1;
  config.parallel.bucket_elements = 3000;
  if (c.recompute_norms)
    config.recompute = recompute_config_from_flags({.granularity = "selective", .modules = {"core_attn", "layernorm"}});
  return config;
}

class MoeParity : public ::testing::TestWithParam<Case> {};

TEST_P(MoeParity, SameLossAsOneDevice) {
  const Case c = GetParam();
  const actors::TrainingConfig config = config_of(c);
  expect_parity(c.name, config);

  expect_router_stats_of_one_device(config);  // the statistics the log line shows
}

// tiny_model has 8 layers: 4 per stage under PP2, 2 per chunk when interleaved (V = 2).
// Capacity 1.0 with top-2 of 4 experts drops the choices beyond each expert's even share.
INSTANTIATE_TEST_SUITE_P(Layouts, MoeParity,
                         ::testing::Values(Case{"PP2_1f1b_dropless", 2, 1, 1, 0.0, false},
                                           Case{"PP2_1f1b_capacity", 2, 1, 1, 1.0, false},
                                           Case{"PP2_V2_interleaved_capacity", 2, 2, 1, 1.0, true},
                                           Case{"DP2_DistOpt_dropless", 1, 1, 2, 0.0, true},
                                           Case{"DP2_DistOpt_capacity", 1, 1, 2, 1.0, false},
                                           Case{"PP2_DP2_DistOpt_capacity", 2, 1, 2, 1.0, true},
                                           Case{"PP2_selective_recompute", 2, 1, 1, 1.0, true, true},
                                           Case{"TP2_SP_PP2_capacity", 2, 1, 1, 1.0, true, false, 2, true},
                                           Case{"TP2_DP2_dropless", 1, 1, 2, 0.0, false, false, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace troupe::test
