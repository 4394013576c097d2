// Shared by the actor-runtime tests: a tiny model, an in-memory dataset of random tokens,
// and the single-device reference (model/train/trainer.hpp) on the same data.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "actors/train/training_run.hpp"
#include "data/data_loader.hpp"
#include "data/sample_source.hpp"
#include "tests/test_util.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

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

// GPUs this process sees (0 in a build without CUDA): multi-GPU tests skip below their need.
inline int visible_gpus() {
#if TROUPE_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

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
  c.hidden_dropout = 0.1f;     // dropout streams must match the single device's too
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

// A small model for GPU runs (bf16, NaN checks on).
inline actors::TrainingConfig gpu_config(int P, int V) {
  actors::TrainingConfig config = tiny_config(false, P, V, 8);
  config.model.hidden_size = 128;
  config.model.num_attention_heads = 4;
  config.model.seq_length = 64;
  config.model.vocab_size = 512;
  config.devices.cuda = true;
  config.devices.compute = DType::bf16;
  config.check_for_nan = true;
  return config;
}

inline std::shared_ptr<const SampleSource> tiny_data(const GptConfig& c, int64_t samples = 512, uint64_t seed = 7) {
  return std::make_shared<RandomTokens>(samples, c.seq_length, int32_t(c.vocab_size), seed);
}

inline std::unique_ptr<DataLoader> loader(std::shared_ptr<const SampleSource> data, int64_t mbs) {
  return std::make_unique<DataLoader>(std::move(data), DataLoaderOptions{.micro_batch_size = mbs});
}

// tiny_data's loader from `consumed` samples on (a resumed run's).
inline std::unique_ptr<DataLoader> loader_at(const actors::TrainingConfig& t, int64_t consumed) {
  return std::make_unique<DataLoader>(
      tiny_data(t.model), DataLoaderOptions{.micro_batch_size = t.micro_batch_size, .consumed_samples = consumed});
}

// The stats of `iters` more iterations of `run`.
inline std::vector<IterationStats> train(actors::TrainingRun& run, int iters) {
  std::vector<IterationStats> out;
  for (int i = 0; i < iters; ++i) out.push_back(run.train_iteration());
  return out;
}

// The stats of `iters` iterations of the actor runtime on tiny_data (`samples` of it: the loader
// does not wrap around, so iters x global batch must fit).
inline std::vector<IterationStats> train_iterations(const actors::TrainingConfig& config, int iters,
                                                    int64_t samples = 512) {
  actors::TrainingRun run(config, loader(tiny_data(config.model, samples, 7), config.micro_batch_size), nullptr);
  return train(run, iters);
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
  if (t.fp8.enabled) model.enable_fp8(t.fp8);
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

// Relative tolerances against the single device.
struct Tolerance {
  double loss = 1e-5, grad_norm = 1e-4, weights = 1e-5;
};

// Trains `config` with the actor runtime for 10 iterations and expects the single-device
// Trainer's numbers on the same data: loss and grad norm per iteration, the gathered weights
// and the validation loss.
inline void expect_parity(const std::string& label, const actors::TrainingConfig& config, Tolerance tol = {}) {
  const int iters = 10, eval_mb = 4;
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
    EXPECT_LT(rel(s.loss, r.loss), tol.loss) << "iteration " << it + 1 << ": " << s.loss << " vs " << r.loss;
    EXPECT_LT(rel(s.grad_norm, r.grad_norm), tol.grad_norm)
        << "iteration " << it + 1 << ": " << s.grad_norm << " vs " << r.grad_norm;
    if (std::getenv("TROUPE_TEST_VERBOSE"))
      std::printf("  iteration %d: loss %.9f vs %.9f, grad norm %.9f vs %.9f\n", it + 1, s.loss, r.loss, s.grad_norm,
                  r.grad_norm);
    worst_loss = std::max(worst_loss, rel(s.loss, r.loss));
    worst_norm = std::max(worst_norm, rel(s.grad_norm, r.grad_norm));
    if (it == iters - 1)
      std::printf(
          "%s: iteration 1 loss %.6f, iteration %d loss %.6f; max relative difference to one device: "
          "loss %.2e, grad norm %.2e\n",
          label.c_str(), ref.stats[0].loss, it + 1, s.loss, worst_loss, worst_norm);
  }
  EXPECT_EQ(run.iteration(), iters);
  EXPECT_EQ(run.consumed_samples(), iters * config.global_batch_size);
  const Tensor weights = run.gather_weights();
  EXPECT_LT(rel_error(weights, ref.weights), tol.weights) << "gathered weights";
  const double valid_loss = run.evaluate(eval_mb);
  EXPECT_LT(rel(valid_loss, ref.valid_loss), tol.loss) << valid_loss << " vs " << ref.valid_loss;
}

}  // namespace troupe::test
