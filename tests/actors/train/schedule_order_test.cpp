// The schedule EMERGES: stage actors that only follow their StagePolicy, with every op taking
// the same time, run exactly the canonical per-stage order of Megatron's schedule
// (schedules::canonical_order) for GPipe, 1F1B and interleaved 1F1B over many (P, V, M).
#include <mutex>

#include "schedules/simulator.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using schedules::Op;
using schedules::Schedule;

struct Case {
  Schedule schedule;
  int P, V, M;
};

std::string order_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) s += schedules::op_str(op) + " ";
  return s;
}

class EmergentOrder : public ::testing::TestWithParam<Case> {};

TEST_P(EmergentOrder, EqualsCanonicalOrder) {
  const Case k = GetParam();
  actors::TrainingConfig config = tiny_config(false, k.P, k.V, k.M);
  config.model.num_layers = k.P * k.V;
  config.parallel.schedule = k.schedule;
  config.fixed_op_duration = std::chrono::milliseconds(30);
  std::mutex mu;
  std::vector<std::vector<Op>> order(size_t(k.P));
  config.before_op = [&](int stage, const Op& op) {
    std::lock_guard<std::mutex> lock(mu);
    order[size_t(stage)].push_back(op);
  };
  auto data = tiny_data(config.model);
  actors::TrainingRun run(config, loader(data, config.micro_batch_size), nullptr);
  const schedules::PipelineShape shape{k.P, k.V, k.M, 0};
  for (int it = 0; it < 2; ++it) {
    for (auto& o : order) o.clear();
    run.train_iteration();
    for (int s = 0; s < k.P; ++s) {
      EXPECT_EQ(order_str(order[size_t(s)]), order_str(schedules::canonical_order(k.schedule, shape, s)))
          << "stage " << s << ", iteration " << it + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, EmergentOrder,
                         ::testing::Values(Case{Schedule::gpipe, 3, 1, 4}, Case{Schedule::one_f_one_b, 2, 1, 5},
                                           Case{Schedule::one_f_one_b, 4, 1, 8}, Case{Schedule::one_f_one_b, 4, 1, 2},
                                           Case{Schedule::interleaved_1f1b, 2, 2, 4},
                                           Case{Schedule::interleaved_1f1b, 2, 3, 6},
                                           Case{Schedule::interleaved_1f1b, 4, 2, 8}),
                         [](const auto& info) {
                           const Case& k = info.param;
                           return std::string(schedules::schedule_name(k.schedule)) + "_P" + std::to_string(k.P) +
                                  "_V" + std::to_string(k.V) + "_M" + std::to_string(k.M);
                         });

}  // namespace
}  // namespace troupe::test
