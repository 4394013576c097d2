// The inference model split over a tensor-parallel group of CPU devices (one thread each)
// against the same model on one device, on the same weights: through a prefill and several
// mixed prefill + decode steps of three sequences, every rank's logits equal its columns of
// the whole vocabulary's logits, for GPT-2 (tied, learned positions, biases), Llama-style
// (grouped-query attention, SwiGLU, RoPE) and Qwen3 (q/k norms on each rank's heads) models. The engine over such a
// group generates what one device does, and a group whose rank stops stepping ends the step with an error.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "actors/fabric/collective_groups.hpp"
#include "model/inference/inference_engine.hpp"
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama, kQwen3 };

const char* family_name(Family f) { return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : "qwen3"; }

GptConfig tiny(Family f) {
  return f == kQwen3 ? tiny_qwen3_inference_config(32, 24, 50) : tiny_inference_config(f == kLlama, 32, 24, 50);
}

// Three sequences: a and b prefill at step 0, c joins at step 1, then all decode to step 4.
// Calls `check(step, logits)` with each step's logits [S, V(l)].
void run_script(InferenceModel& model, KvCache& cache, const std::function<void(int, const Tensor&)>& check) {
  const int32_t V = int32_t(model.config().vocab_size);
  const std::vector<int32_t> a = random_token_list(11, 1, V), b = random_token_list(9, 2, V),
                             c = random_token_list(9, 3, V);
  std::vector<int32_t> ba, bb, bc;
  TROUPE_CHECK(cache.allocate(3, ba) && cache.allocate(3, bb) && cache.allocate(3, bc), "cache too small");
  const auto span = [](const std::vector<int32_t>& t, int64_t from, int64_t n) {
    return std::span(t).subspan(size_t(from), size_t(n));
  };
  check(0, model.forward(std::vector<SequenceInput>{{span(a, 0, 7), 0, ba}, {span(b, 0, 5), 0, bb}}, cache));
  check(1,
        model.forward(
            std::vector<SequenceInput>{{span(a, 7, 1), 7, ba}, {span(b, 5, 1), 5, bb}, {span(c, 0, 6), 0, bc}}, cache));
  for (int step = 2; step <= 4; ++step) {
    const int64_t i = step - 2;
    check(step, model.forward(
                    std::vector<SequenceInput>{
                        {span(a, 8 + i, 1), 8 + i, ba}, {span(b, 6 + i, 1), 6 + i, bb}, {span(c, 6 + i, 1), 6 + i, bc}},
                    cache));
  }
  cache.release(ba);
  cache.release(bb);
  cache.release(bc);
}

// Columns [from, from + n) of a host [S, W] tensor.
Tensor columns(const Tensor& t, int64_t from, int64_t n) {
  Tensor out = Tensor::host(DType::f32, {t.dim(0), n});
  for (int64_t r = 0; r < t.dim(0); ++r)
    std::copy_n(t.data_as<float>() + r * t.dim(1) + from, n, out.data_as<float>() + r * n);
  return out;
}

class InferenceTensorParallel : public ::testing::TestWithParam<std::tuple<Family, int>> {};

TEST_P(InferenceTensorParallel, RanksHoldTheirColumnsOfTheWholeLogits) {
  const auto [family, tensor_parallel] = GetParam();
  const int T = tensor_parallel;  // a plain variable: lambdas capture it (clang 14 cannot capture a binding)
  const GptConfig c = tiny(family);
  const ParamLayout whole(c, ChunkSpec::whole_model());
  const Tensor w = random_normal({whole.size()}, 5, 0.3f);
  const InferenceModelOptions options{.max_tokens = 32, .max_sequences = 4};

  std::vector<Tensor> ref;  // per step, [S, Vp] on the host
  {
    InferenceModel model(cpu(), c, DType::f32, options);
    model.load_weights(w);
    KvCache cache(cpu(), c, DType::f32, 16, 4);
    run_script(model, cache, [&](int, const Tensor& logits) { ref.push_back(to_host_f32(cpu(), logits)); });
  }

  auto group = actors::make_cpu_group(T, {"tp", std::chrono::seconds(60)});
  std::mutex mu;
  double worst = 0;
  int checked = 0;
  run_threads(T, [&](int r) {
    try {
      const Context ctx = Context::cpu();
      InferenceModel model(ctx, c, DType::f32, options, {{r, T}, false, group[size_t(r)].get()});
      model.load_weights(shard_params(whole, w, model.layout()));
      KvCache cache(ctx, c, DType::f32, 16, 4, T);
      EXPECT_EQ(cache.k(0).dim(2), c.query_groups() / T);
      const int64_t start = model.layout().vocab_start(), vl = model.layout().local_vocab();
      const int64_t real = std::clamp(c.vocab_size - start, int64_t(0), vl);  // columns past the vocabulary are padding
      run_script(model, cache, [&](int step, const Tensor& logits) {
        ASSERT_EQ(logits.shape(), (Shape{ref[size_t(step)].dim(0), vl}));
        if (real == 0) return;
        const double err = rel_error(columns(logits, 0, real), columns(ref[size_t(step)], start, real));
        std::lock_guard lock(mu);
        worst = std::max(worst, err);
        ++checked;
      });
    } catch (...) {
      for (auto& g : group) g->abort();  // the other ranks stop waiting for this one
      throw;
    }
  });
  std::printf("%s TP%d: max rel err %.2e over %d rank-steps\n", family_name(family), T, worst, checked);
  EXPECT_EQ(checked, 5 * T);
  EXPECT_LT(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, InferenceTensorParallel,
                         ::testing::Values(std::tuple(kGpt2, 2), std::tuple(kGpt2, 4), std::tuple(kLlama, 2),
                                           std::tuple(kQwen3, 2)),
                         [](const auto& info) {
                           return str_cat(family_name(std::get<0>(info.param)), "_TP", std::get<1>(info.param));
                         });

TEST(InferenceTensorParallelChecks, RefusesAGroupWithoutCollectivesAndAMismatchedCache) {
  const GptConfig c = tiny(kLlama);
  EXPECT_THROW(InferenceModel(cpu(), c, DType::f32, {}, {{0, 2}, false, nullptr}), Error);
  auto group = actors::make_cpu_group(1);
  EXPECT_THROW(InferenceModel(cpu(), c, DType::f32, {}, {{0, 1}, true, group[0].get()}), Error);  // sequence parallel
  EXPECT_THROW(KvCache(cpu(), c, DType::f32, 4, 4, 4), Error);  // 2 query groups over 4 ranks
  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 8, .max_sequences = 2});
  KvCache half(cpu(), c, DType::f32, 4, 4, 2);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(half.allocate(1, blocks));
  const std::vector<int32_t> tokens{1, 2};
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{tokens, 0, blocks}}, half), Error);
}

// The engine over a tensor-parallel group: the same requests batched together on a TP1 engine
// and on a TP group's engine (rank 0 here, the others on the engine's threads) get the same
// tokens and log-probs: greedy (the ranks' slices merged on the host) and sampled with seeds
// (whole rows assembled from the slices).
class EngineTensorParallel : public ::testing::TestWithParam<std::tuple<Family, int, bool>> {};

TEST_P(EngineTensorParallel, SameTokensAsOneDevice) {
  const auto [family, T, greedy] = GetParam();
  const GptConfig c = tiny(family);
  const ParamLayout whole(c, ChunkSpec::whole_model());
  const Tensor w = random_normal({whole.size()}, 7, 0.3f);
  const InferenceModelOptions options{.max_tokens = 32, .max_sequences = 8};
  const std::vector<GenerationRequest> requests = engine_requests(greedy);

  InferenceModel one(cpu(), c, DType::f32, options);
  one.load_weights(w);
  const std::vector<EngineOutcome> ref = run_engine({&one}, requests);

  auto group = actors::make_cpu_group(T, {"tp", std::chrono::seconds(60)});
  std::vector<Context> contexts;
  for (int r = 0; r < T; ++r) contexts.push_back(Context::cpu());
  std::vector<std::unique_ptr<InferenceModel>> models;
  std::vector<InferenceModel*> ranks;
  for (int r = 0; r < T; ++r) {
    models.push_back(std::make_unique<InferenceModel>(contexts[size_t(r)], c, DType::f32, options,
                                                      TensorParallel{{r, T}, false, group[size_t(r)].get()}));
    models.back()->load_weights(shard_params(whole, w, models.back()->layout()));
    ranks.push_back(models.back().get());
  }
  const std::vector<EngineOutcome> got = run_engine(ranks, requests);
  const double worst = expect_same_tokens(got, ref);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(int64_t(ref[i].tokens.size()), requests[i].sampling.max_tokens);
  std::printf("%s TP%d %s: tokens equal, max |logprob diff| %.2e\n", family_name(family), T,
              greedy ? "greedy" : "sampled", worst);
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EngineTensorParallel,
                         ::testing::Values(std::tuple(kGpt2, 2, true), std::tuple(kGpt2, 2, false),
                                           std::tuple(kLlama, 2, true), std::tuple(kLlama, 2, false),
                                           std::tuple(kGpt2, 4, true), std::tuple(kQwen3, 2, true)),
                         [](const auto& info) {
                           return str_cat(family_name(std::get<0>(info.param)), "_TP", std::get<1>(info.param),
                                          std::get<2>(info.param) ? "_greedy" : "_sampled");
                         });

TEST(EngineTensorParallelChecks, RefusesModelsOutOfRankOrder) {
  const GptConfig c = tiny(kGpt2);
  auto group = actors::make_cpu_group(2);
  InferenceModel r0(cpu(), c, DType::f32, {.max_tokens = 8, .max_sequences = 2}, {{0, 2}, false, group[0].get()});
  InferenceModel r1(cpu(), c, DType::f32, {.max_tokens = 8, .max_sequences = 2}, {{1, 2}, false, group[1].get()});
  EXPECT_THROW(InferenceEngine({&r1, &r0}, {.num_blocks = 4}), Error);
  EXPECT_THROW(InferenceEngine({&r0}, {.num_blocks = 4}), Error);
}

// A member that stops stepping once armed: its next all-reduce blocks until the group is
// aborted (as a rank wedged in a device hang or a dead peer would leave the others waiting).
class StallingCollectives final : public Collectives {
 public:
  explicit StallingCollectives(Collectives& inner) : inner_(inner) {}
  void arm() { armed_ = true; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(const Context& ctx, const Tensor& t, ReduceOp op) override {
    if (armed_) {
      std::unique_lock lock(mu_);
      aborted_cv_.wait(lock, [&] { return aborted_; });
      TROUPE_FAIL("the stalled member was aborted");
    }
    inner_.all_reduce(ctx, t, op);
  }
  void reduce_scatter(const Context& ctx, const Tensor& in, const Tensor& out) override {
    inner_.reduce_scatter(ctx, in, out);
  }
  void all_gather(const Context& ctx, const Tensor& in, const Tensor& out) override { inner_.all_gather(ctx, in, out); }
  void broadcast(const Context& ctx, const Tensor& t, int root) override { inner_.broadcast(ctx, t, root); }
  void abort() override {
    {
      std::lock_guard lock(mu_);
      aborted_ = true;
    }
    aborted_cv_.notify_all();
    inner_.abort();
  }

 private:
  Collectives& inner_;
  std::atomic<bool> armed_{false};
  std::mutex mu_;
  std::condition_variable aborted_cv_;
  bool aborted_ = false;
};

TEST(EngineTensorParallelChecks, AStalledRankFailsTheStepWithinTheTimeout) {
  const GptConfig c = tiny(kGpt2);
  const ParamLayout whole(c, ChunkSpec::whole_model());
  const Tensor w = random_normal({whole.size()}, 7, 0.3f);
  auto group = actors::make_cpu_group(2, {"tp", std::chrono::seconds(600)});  // longer than the test may take
  StallingCollectives stalling(*group[1]);
  const Context ctx0 = Context::cpu(), ctx1 = Context::cpu();
  const InferenceModelOptions options{.max_tokens = 16, .max_sequences = 2};
  InferenceModel r0(ctx0, c, DType::f32, options, {{0, 2}, false, group[0].get()});
  InferenceModel r1(ctx1, c, DType::f32, options, {{1, 2}, false, &stalling});
  r0.load_weights(shard_params(whole, w, r0.layout()));
  r1.load_weights(shard_params(whole, w, r1.layout()));
  InferenceEngine engine({&r0, &r1}, {.num_blocks = 8, .block_size = 4, .step_timeout_s = 0.5});
  SamplingParams greedy;
  greedy.max_tokens = 8;
  int tokens = 0;
  engine.add_request({{1, 2, 3}, greedy}, [&](const TokenEvent& e) { tokens += e.has_token; });
  ASSERT_TRUE(engine.step());  // the prefill: both ranks step
  EXPECT_EQ(tokens, 1);

  stalling.arm();
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    engine.step();
  } catch (const Error& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(what.find("did not finish within 0.5 s"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1 (forward)"), std::string::npos) << what;  // rank 0 waited in its all-reduce too
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(tokens, 1);
  EXPECT_THROW(engine.step(), Error);  // the group stays aborted
}

}  // namespace
}  // namespace troupe::test
