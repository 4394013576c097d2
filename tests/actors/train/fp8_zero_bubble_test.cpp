// FP8 under the zero-bubble schedules (issue 21): the B op runs the FP8 input-gradient GEMMs and
// keeps the scales it cast with, the W op the FP8 weight-gradient GEMMs with those scales. On CPU
// devices (the FP8 emulation is deterministic) ZB-H1 and ZB-V on two stages train as 1F1B on two
// stages does with the same recipe: loss and grad norm of 10 iterations and the weights after,
// for e4m3 and hybrid under delayed and tensorwise scaling, and with --no-fp8-wgrad. And one stage
// on one device steps its delayed scales as the single-device Trainer does.
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using schedules::Schedule;

struct Case {
  Schedule schedule;
  std::string format, recipe;
  bool wgrad = true;
};

std::string name_of(const Case& c) {
  return str_cat(c.schedule == Schedule::zb_v ? "zbv_" : "zbh1_", c.format, "_", c.recipe, c.wgrad ? "" : "_NoWgrad");
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

actors::TrainingConfig fp8_config(const Case& c, Schedule schedule) {
  const bool v = schedule == Schedule::zb_v;
  actors::TrainingConfig config = tiny_config(false, 2, v ? 2 : 1);
  config.parallel.schedule = schedule;
  config.model.num_layers = 4;  // ZB-V: a layer per chunk
  Fp8Flags flags{.format = c.format, .recipe = c.recipe, .no_wgrad = !c.wgrad};
  if (c.recipe == "delayed") {
    flags.amax_history_len = 3;
    flags.amax_compute_algo = "max";
  }
  config.fp8 = fp8_recipe_from_flags(flags);
  return config;
}

class Fp8ZeroBubble : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8ZeroBubble, TrainsAsOneFOneB) {
  const Case c = GetParam();
  const int iters = 10;
  auto data = tiny_data(fp8_config(c, Schedule::one_f_one_b).model);
  actors::TrainingRun ref_run(fp8_config(c, Schedule::one_f_one_b), loader(data, 2), nullptr);
  actors::TrainingRun zb_run(fp8_config(c, c.schedule), loader(data, 2), nullptr);
  double worst_loss = 0, worst_norm = 0;
  for (int it = 0; it < iters; ++it) {
    const IterationStats r = ref_run.train_iteration();
    const IterationStats s = zb_run.train_iteration();
    worst_loss = std::max(worst_loss, rel(s.loss, r.loss));
    worst_norm = std::max(worst_norm, rel(s.grad_norm, r.grad_norm));
    EXPECT_LE(rel(s.loss, r.loss), 1e-6) << "iteration " << it + 1 << ": " << s.loss << " vs " << r.loss;
    EXPECT_LE(rel(s.grad_norm, r.grad_norm), 1e-6)
        << "iteration " << it + 1 << ": " << s.grad_norm << " vs " << r.grad_norm;
  }
  const double weights = rel_error(zb_run.gather_weights(), ref_run.gather_weights());
  std::printf("  %s against 1f1b PP2: max relative difference loss %.2e, grad norm %.2e; weights %.2e\n",
              name_of(c).c_str(), worst_loss, worst_norm, weights);
  EXPECT_LE(weights, 1e-6);
}

// And FP8 is on: the same run without it takes other losses.
TEST(Fp8ZeroBubbleSanity, Fp8ChangesTheLosses) {
  const Case c{Schedule::zb_h1, "hybrid", "delayed"};
  actors::TrainingConfig fp8 = fp8_config(c, Schedule::zb_h1), off = fp8;
  off.fp8 = Fp8Recipe{};
  const std::vector<IterationStats> a = train_iterations(fp8, 3), b = train_iterations(off, 3);
  EXPECT_NE(a.back().loss, b.back().loss);
}

// One stage on one device (its optimizer steps the whole model) updates the delayed scales too:
// the single-device Trainer's numbers.
TEST(Fp8OneStage, DelayedScalingAsTheTrainer) {
  actors::TrainingConfig config = tiny_config(false, 1, 1);
  config.model.num_layers = 4;
  config.fp8 = fp8_recipe_from_flags({.format = "hybrid", .recipe = "delayed", .amax_history_len = 2});
  expect_parity("fp8 hybrid delayed, one stage", config, Tolerance{1e-6, 1e-6, 1e-6});
}

constexpr Schedule H1 = Schedule::zb_h1, V = Schedule::zb_v;
INSTANTIATE_TEST_SUITE_P(Recipes, Fp8ZeroBubble,
                         ::testing::Values(Case{H1, "e4m3", "delayed"}, Case{H1, "hybrid", "delayed"},
                                           Case{H1, "e4m3", "tensorwise"}, Case{H1, "hybrid", "tensorwise"},
                                           Case{H1, "hybrid", "delayed", false},
                                           Case{H1, "hybrid", "tensorwise", false}, Case{V, "e4m3", "delayed"},
                                           Case{V, "hybrid", "delayed"}, Case{V, "e4m3", "tensorwise"},
                                           Case{V, "hybrid", "tensorwise"}, Case{V, "hybrid", "delayed", false}),
                         [](const auto& info) { return name_of(info.param); });

}  // namespace
}  // namespace troupe::test
