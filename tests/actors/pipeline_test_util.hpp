// Shared by the actor-runtime tests: a tiny model, an in-memory dataset of random tokens,
// and the single-device reference (model/trainer.hpp) on the same data.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "actors/training_run.hpp"
#include "data/data_loader.hpp"
#include "data/sample_source.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

// Samples of seq + 1 tokens from a fixed random walk (next = 7 * previous + 1 + {0, 1, 2}
// mod vocab): learnable, so the loss falls quickly and parity is checked on a moving model.
class RandomTokens final : public SampleSource {
 public:
  RandomTokens(int64_t samples, int64_t seq, int32_t vocab, uint64_t seed) : n_(samples), seq_(seq) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, vocab - 1), step(0, 2);
    tokens_.resize(size_t(samples * (seq + 1)));
    for (size_t i = 0; i < tokens_.size(); ++i)
      tokens_[i] = i % size_t(seq + 1) == 0 ? pick(rng) : (7 * tokens_[i - 1] + 1 + step(rng)) % vocab;
  }
  int64_t size() const override { return n_; }
  int64_t sequence_length() const override { return seq_; }
  void sample(int64_t index, int32_t* out) const override {
    std::copy_n(tokens_.begin() + index * (seq_ + 1), seq_ + 1, out);
  }

 private:
  int64_t n_, seq_;
  std::vector<int32_t> tokens_;
};

inline GptConfig tiny_model(bool llama) {
  GptConfig c = llama ? GptConfig::llama_style(8, 32, 4, 2, 64) : GptConfig::gpt2_124m();
  if (!llama) {
    c.num_layers = 8;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
  }
  c.seq_length = 16;
  c.vocab_size = 200;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;  // dropout streams must match the single device's too
  c.attention_dropout = 0.0f;  // not implemented in the model
  return c;
}

inline actors::TrainingConfig tiny_config(bool llama, int P, int V, int microbatches = 8) {
  actors::TrainingConfig t;
  t.model = tiny_model(llama);
  t.parallel.pipeline_size = P;
  t.parallel.virtual_chunks = V;
  t.parallel.schedule = V > 1 ? schedules::Schedule::interleaved_1f1b : schedules::Schedule::one_f_one_b;
  t.optimizer = {.adam = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                 .clip_grad = 0.5f};
  t.lr = {.lr = 5e-3, .min_lr = 5e-4, .warmup_iters = 3, .decay_iters = 20, .style = LrDecayStyle::cosine};
  t.micro_batch_size = 2;
  t.global_batch_size = 2 * microbatches;
  t.seed = 4321;
  t.op_timeout = std::chrono::seconds(60);
  return t;
}

inline std::shared_ptr<const SampleSource> tiny_data(const GptConfig& c, int64_t samples = 512, uint64_t seed = 7) {
  return std::make_shared<RandomTokens>(samples, c.seq_length, int32_t(c.vocab_size), seed);
}

inline std::unique_ptr<DataLoader> loader(std::shared_ptr<const SampleSource> data, int64_t mbs) {
  return std::make_unique<DataLoader>(std::move(data), DataLoaderOptions{.micro_batch_size = mbs});
}

// The single-device losses (and grad norms) of `iters` iterations on the same data.
struct Reference {
  std::vector<IterationStats> stats;
  double valid_loss = 0;
  Tensor weights;  // host f32, the whole model after training
};

inline Reference single_device(const actors::TrainingConfig& t, std::shared_ptr<const SampleSource> train,
                               std::shared_ptr<const SampleSource> valid, int iters, int eval_microbatches) {
  GptChunk model(cpu(), t.model, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(t.seed);
  Optimizer optimizer(model, t.optimizer);
  Trainer trainer(model, optimizer, t.lr, nullptr, t.seed);
  auto train_loader = loader(std::move(train), t.micro_batch_size);
  const int M = int(t.global_batch_size / t.micro_batch_size);
  Reference ref;
  for (int it = 0; it < iters; ++it) {
    std::vector<Batch> batches;
    for (int m = 0; m < M; ++m) batches.push_back(actors::to_batch(*train_loader->next()));
    ref.stats.push_back(trainer.train_step(batches));
  }
  ref.weights = to_host_f32(cpu(), model.params());
  if (ref.weights.data() == model.params().data()) {  // a host model: take a copy
    ref.weights = Tensor::host(DType::f32, model.params().shape());
    copy(cpu(), model.params(), ref.weights);
  }
  if (valid) {
    auto valid_loader = loader(std::move(valid), t.micro_batch_size);
    std::vector<Batch> batches;
    for (int m = 0; m < eval_microbatches; ++m) batches.push_back(actors::to_batch(*valid_loader->next()));
    ref.valid_loss = trainer.evaluate(batches);
  }
  return ref;
}

inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

}  // namespace troupe::test
