// A short training run on the bundled text (CPU, f32): a small GPT-2 trained on Moby Dick
// must lower its loss by several nats. Prints the loss curve.
#include <cstdio>

#include "data/token_windows.hpp"
#include "model/train/trainer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(TrainingRun, LossFallsBySeveralNatsOnMobyDick) {
  TokenizerOptions topt;
  topt.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
  topt.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
  const auto tokenizer = build_tokenizer(topt);
  const std::vector<int32_t> ids = tokenize_jsonl(source_path("assets/corpora/moby-dick.jsonl"), *tokenizer);
  ASSERT_GT(ids.size(), 200000u);
  const size_t n_valid = 4096;
  const std::span<const int32_t> all(ids);
  TokenWindows train{all.first(all.size() - n_valid), 1}, valid{all.last(n_valid), 2};

  GptConfig c = GptConfig::gpt2_124m();
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = tokenizer->vocab_size();
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(1234);
  Optimizer optimizer(
      model, {.adam = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}, .clip_grad = 1.0f});
  const int64_t iters = 150;
  LrSchedule schedule{.lr = 5e-3,
                      .min_lr = 5e-4,
                      .warmup_init = 0,
                      .warmup_iters = 10,
                      .decay_iters = iters,
                      .style = LrDecayStyle::cosine};
  Trainer trainer(model, optimizer, schedule);

  std::vector<Batch> eval;
  for (int i = 0; i < 4; ++i) eval.push_back(valid.window(i * 8, 8, c.seq_length));
  const double valid_before = trainer.evaluate(eval);
  double first = 0, last = 0;
  std::printf("iteration   loss\n");
  for (int64_t it = 1; it <= iters; ++it) {
    const IterationStats s = trainer.train_step({train.next(8, c.seq_length)});
    ASSERT_FALSE(s.skipped);
    if (it == 1) first = s.loss;
    last = s.loss;
    if (it == 1 || it % 15 == 0) std::printf("%9ld %8.4f\n", long(it), s.loss);
  }
  const double valid_after = trainer.evaluate(eval);
  std::printf("training loss %.3f -> %.3f; validation loss %.3f -> %.3f\n", first, last, valid_before, valid_after);
  EXPECT_NEAR(first, std::log(double(c.vocab_size)), 0.3);
  EXPECT_GT(first - last, 3.0);
  EXPECT_GT(valid_before - valid_after, 3.0);
}

}  // namespace
}  // namespace troupe::test
