// Every pipeline layout on CPU devices reproduces the single-device Trainer: the same loss
// and grad norm per iteration (relative 1e-5) for 10 iterations on the same data, GPT-2
// (tied embeddings split over the first and last stage) and Llama-style (untied), and the
// same validation loss.
#include <cstdio>

#include "tests/actors/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Layout {
  int P, V;
};

void expect_parity(bool llama, Layout layout) {
  const int iters = 10, eval_mb = 4;
  const actors::TrainingConfig config = tiny_config(llama, layout.P, layout.V);
  auto train = tiny_data(config.model, 512, 7);
  auto valid = tiny_data(config.model, 64, 8);
  const Reference ref = single_device(config, train, valid, iters, eval_mb);

  actors::TrainingRun run(config, loader(train, config.micro_batch_size), loader(valid, config.micro_batch_size));
  double worst_loss = 0, worst_norm = 0;
  for (int it = 0; it < iters; ++it) {
    const IterationStats s = run.train_iteration();
    const IterationStats& r = ref.stats[size_t(it)];
    EXPECT_EQ(s.iteration, r.iteration);
    EXPECT_EQ(s.tokens, r.tokens);
    EXPECT_DOUBLE_EQ(s.lr, r.lr);
    EXPECT_LT(rel(s.loss, r.loss), 1e-5) << "iteration " << it + 1 << ": " << s.loss << " vs " << r.loss;
    EXPECT_LT(rel(s.grad_norm, r.grad_norm), 1e-4) << "iteration " << it + 1 << ": " << s.grad_norm << " vs "
                                                   << r.grad_norm;
    if (getenv("VERBOSE")) std::printf("  it %d loss %.3e norm %.3e\n", it + 1, rel(s.loss, r.loss), rel(s.grad_norm, r.grad_norm));
    worst_loss = std::max(worst_loss, rel(s.loss, r.loss));
    worst_norm = std::max(worst_norm, rel(s.grad_norm, r.grad_norm));
    if (it == iters - 1)
      std::printf("%s P=%d V=%d: iteration 1 loss %.6f, iteration %d loss %.6f; max relative difference to one "
                  "device: loss %.2e, grad norm %.2e\n",
                  llama ? "llama" : "gpt2 ", layout.P, layout.V, ref.stats[0].loss, it + 1, s.loss, worst_loss,
                  worst_norm);
  }
  EXPECT_EQ(run.iteration(), iters);
  EXPECT_EQ(run.consumed_samples(), iters * config.global_batch_size);
  const Tensor weights = run.gather_weights();
  EXPECT_LT(rel_error(weights, ref.weights), 1e-5) << "gathered weights";
  const double valid_loss = run.evaluate(eval_mb);
  EXPECT_LT(rel(valid_loss, ref.valid_loss), 1e-5) << valid_loss << " vs " << ref.valid_loss;
}

class PipelineParity : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(PipelineParity, SameLossAsOneDevice) {
  const auto [llama, P, V] = GetParam();
  expect_parity(llama, {P, V});
}

INSTANTIATE_TEST_SUITE_P(Layouts, PipelineParity,
                         ::testing::Values(std::tuple(false, 1, 1), std::tuple(false, 2, 1), std::tuple(false, 4, 1),
                                           std::tuple(false, 2, 2), std::tuple(false, 4, 2), std::tuple(true, 1, 1),
                                           std::tuple(true, 2, 1), std::tuple(true, 4, 1), std::tuple(true, 2, 2),
                                           std::tuple(true, 4, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "llama" : "gpt2") + "_P" +
                                  std::to_string(std::get<1>(info.param)) + "_V" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace troupe::test
