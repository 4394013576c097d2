// Every pipeline layout on CPU devices reproduces the single-device Trainer: the same loss
// and grad norm per iteration (relative 1e-5) for 10 iterations on the same data, GPT-2
// (tied embeddings split over the first and last stage) and Llama-style (untied), and the
// same validation loss.
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

class PipelineParity : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(PipelineParity, SameLossAsOneDevice) {
  const auto [llama, P, V] = GetParam();
  expect_parity(str_cat(llama ? "llama" : "gpt2 ", " P=", P, " V=", V), tiny_config(llama, P, V));
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
