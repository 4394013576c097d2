// Zero-bubble's split backward (GptChunk::backward_input + backward_weight) against backward():
// the same gradients and input gradients bit for bit on the CPU, for GPT-2, Llama and Qwen3 (q/k
// norms) shapes, whole-model, first and last pipeline chunks, and tensor parallelism with
// sequence parallelism; two microbatches whose Bs both run before their Ws (the kept output
// gradients must outlive the shared scratch). The grads-ready hook fires only from W, with
// backward's values; what the split does not support is refused naming the flags.
#include <chrono>
#include <mutex>

#include "actors/fabric/collective_groups.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama, kQwen3 };

// Dropout 0 is the case where B keeps the residual stream's gradient by trading buffers (no copy).
GptConfig tiny(Family f, float hidden_dropout = 0.1f) {
  GptConfig c = f == kGpt2 ? GptConfig::gpt2_124m() : GptConfig::llama_style(2, 32, 4, 2, 48);
  if (f == kGpt2) {
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
  }
  if (f == kQwen3) {
    c.kv_channels = 16;
    c.qk_layernorm = true;
    c.untie_embeddings_and_output_weights = false;  // a tied output layer: W's order matters
  }
  c.seq_length = 8;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = hidden_dropout;
  c.attention_dropout = 0.0f;
  return c;
}

const char* family_name(Family f) { return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : "qwen3"; }

constexpr int64_t kBatch = 2;
constexpr int kMicrobatches = 2;

struct Result {
  Tensor grads;                  // host f32 copy of grads()
  std::vector<Tensor> dinputs;   // per microbatch (not pre-process)
  std::vector<int64_t> ready;    // the grads-ready hook's values, in order
  size_t ready_after_input = 0;  // hook calls before the first W (split)
  int64_t weight_ns = 0;         // the fused backwards' timed weight-gradient part (time_weights)
};

// Sums the clock time of the weight-gradient spans (a CPU device: the work runs as it is enqueued).
class WeightClock final : public StreamSpans {
 public:
  void begin(const Context&, SpanKind) override { t0_ = std::chrono::steady_clock::now(); }
  void end(const Context&, SpanKind) override {
    total_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
  }
  int64_t total_ns = 0;

 private:
  std::chrono::steady_clock::time_point t0_;
};

// Two microbatches through one chunk: forward both, then backward() each, or (split) both Bs,
// then both Ws. A chunk that is not post-process gets a random output gradient.
Result run(const Context& ctx, const GptConfig& c, const ChunkSpec& spec, TensorParallel tp, bool split,
           bool time_weights = false) {
  GptChunk model(ctx, c, spec, DType::f32, tp);
  model.init_weights(5);
  WeightClock clock;
  if (time_weights) model.set_weight_grad_spans(&clock);
  Result r;
  model.set_grads_ready_hook([&r](int64_t ready) { r.ready.push_back(ready); });
  const int64_t T = c.seq_length;
  const Shape hidden = model.hidden_shape(kBatch, T);
  std::vector<ActivationsPtr> acts;
  std::vector<Tensor> douts;
  for (int m = 0; m < kMicrobatches; ++m) {
    const ForwardOptions fo{
        .training = true, .loss_grad_scale = 0.05f, .dropout_seed = uint64_t(7 + m), .batch = kBatch, .seq = T};
    const Tensor tokens = random_tokens({kBatch, T}, 11 + uint64_t(m), int32_t(c.vocab_size));
    const Tensor input = spec.pre_process ? tokens : random_normal(hidden, 21 + uint64_t(m));
    const Tensor targets =
        spec.post_process ? random_tokens({kBatch, T}, 31 + uint64_t(m), int32_t(c.vocab_size)) : Tensor();
    const Tensor output = spec.post_process ? Tensor() : Tensor::host(DType::f32, hidden);
    acts.push_back(model.forward(input, targets, output, fo));
    douts.push_back(spec.post_process ? Tensor() : random_normal(hidden, 41 + uint64_t(m)));
    r.dinputs.push_back(spec.pre_process ? Tensor() : Tensor::zeros(ctx, DType::f32, hidden));
  }
  if (split) {
    for (int m = 0; m < kMicrobatches; ++m)
      model.backward_input(*acts[size_t(m)], douts[size_t(m)], r.dinputs[size_t(m)]);
    r.ready_after_input = r.ready.size();
    for (int m = 0; m < kMicrobatches; ++m) model.backward_weight(*acts[size_t(m)]);
  } else {
    for (int m = 0; m < kMicrobatches; ++m) model.backward(*acts[size_t(m)], douts[size_t(m)], r.dinputs[size_t(m)]);
  }
  for (ActivationsPtr& a : acts) model.release(std::move(a));
  r.weight_ns = clock.total_ns;
  r.grads = Tensor::host(DType::f32, {model.grads().numel()});
  copy(ctx, model.grads(), r.grads);
  return r;
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  EXPECT_EQ(max_abs_diff(got.grads, want.grads), 0.0) << what << ": parameter gradients";
  for (size_t m = 0; m < want.dinputs.size(); ++m) {
    if (want.dinputs[m].defined()) {
      EXPECT_EQ(max_abs_diff(got.dinputs[m], want.dinputs[m]), 0.0) << what << ": input gradient " << m;
    }
  }
  EXPECT_EQ(got.ready_after_input, 0u) << what << ": backward_input said a gradient was final";
  EXPECT_EQ(got.ready, want.ready) << what << ": grads-ready hook";
}

TEST(SplitBackward, EqualsBackwardBitForBit) {
  for (const float dropout : {0.1f, 0.0f})
    for (Family f : {kGpt2, kLlama, kQwen3}) {
      const GptConfig c = tiny(f, dropout);
      const std::vector<std::pair<const char*, ChunkSpec>> specs = {
          {"whole", ChunkSpec::whole_model()}, {"first", {0, 1, true, false}}, {"last", {1, 1, false, true}}};
      for (const auto& [name, spec] : specs) {
        const Result want = run(cpu(), c, spec, {}, false);
        const Result got = run(cpu(), c, spec, {}, true);
        EXPECT_GT(want.ready.size(), 2u);
        expect_same(got, want, str_cat(family_name(f), " ", name, " dropout ", dropout));
      }
    }
}

// A fused backward that times its weight-gradient part for the trace (weight_ns) runs each
// linear's backward as the input-gradient GEMM, then the weight gradients: the same bits.
TEST(SplitBackward, TimingTheFusedBackwardsWeightGradientsKeepsItsBits) {
  for (Family f : {kGpt2, kLlama}) {
    const GptConfig c = tiny(f, 0.0f);
    for (const ChunkSpec& spec : {ChunkSpec::whole_model(), ChunkSpec{1, 1, false, true}}) {
      const Result want = run(cpu(), c, spec, {}, false);
      const Result got = run(cpu(), c, spec, {}, false, /*time_weights=*/true);
      EXPECT_EQ(want.weight_ns, 0);
      EXPECT_GT(got.weight_ns, 0) << family_name(f);
      EXPECT_EQ(max_abs_diff(got.grads, want.grads), 0.0) << family_name(f) << ": parameter gradients";
      EXPECT_EQ(got.ready, want.ready) << family_name(f) << ": grads-ready hook";
      for (size_t m = 0; m < want.dinputs.size(); ++m) {
        if (!want.dinputs[m].defined()) continue;
        EXPECT_EQ(max_abs_diff(got.dinputs[m], want.dinputs[m]), 0.0);
      }
    }
  }
}

TEST(SplitBackward, EqualsBackwardUnderTensorAndSequenceParallelism) {
  for (Family f : {kGpt2, kLlama}) {
    const GptConfig c = tiny(f, f == kGpt2 ? 0.0f : 0.1f);
    constexpr int kRanks = 2;
    auto group = actors::make_cpu_group(kRanks, {"tp", std::chrono::seconds(60)});
    std::vector<Result> want(kRanks), got(kRanks);
    run_threads(kRanks, [&](int t) {
      try {
        const Context ctx = Context::cpu();
        const TensorParallel tp{{t, kRanks}, true, group[size_t(t)].get()};
        for (const ChunkSpec& spec : {ChunkSpec::whole_model(), ChunkSpec{0, 1, true, false}}) {
          want[size_t(t)] = run(ctx, c, spec, tp, false);
          got[size_t(t)] = run(ctx, c, spec, tp, true);
          expect_same(got[size_t(t)], want[size_t(t)],
                      str_cat(family_name(f), " TP rank ", t, spec.post_process ? " whole" : " first"));
        }
      } catch (...) {
        for (auto& g : group) g->abort();
        throw;
      }
    });
  }
}

std::string split_error(const GptConfig& c, const RecomputeConfig& recompute) {
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32, {}, 1, recompute);
  model.init_weights(5);
  const Tensor tokens = random_tokens({kBatch, c.seq_length}, 1, int32_t(c.vocab_size));
  ActivationsPtr a = model.forward(tokens, tokens, Tensor(), {.training = true});
  try {
    model.backward_input(*a, Tensor(), Tensor());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SplitBackward, RefusesWhatItDoesNotSplit) {
  GptConfig moe = tiny(kLlama);
  moe.moe.num_experts = 4;
  moe.moe.moe_router_topk = 2;
  EXPECT_NE(split_error(moe, {}).find("--pipeline-schedule zb-h1 or zb-v with --num-experts"), std::string::npos);
  const RecomputeConfig full =
      recompute_config_from_flags({.granularity = "full", .method = "uniform", .num_layers = 1, .modules = {}});
  EXPECT_NE(split_error(tiny(kGpt2), full).find("--recompute-granularity"), std::string::npos);
}

TEST(SplitBackward, WeightWithoutInputIsAnError) {
  const GptConfig c = tiny(kGpt2);
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(5);
  const Tensor tokens = random_tokens({kBatch, c.seq_length}, 1, int32_t(c.vocab_size));
  ActivationsPtr a = model.forward(tokens, tokens, Tensor(), {.training = true});
  EXPECT_THROW(model.backward_weight(*a), Error);
  model.backward_input(*a, Tensor(), Tensor());
  model.backward_weight(*a);
  EXPECT_THROW(model.backward_weight(*a), Error);  // once per backward_input
}

}  // namespace
}  // namespace troupe::test
