// Context parallelism in the model: C chunks (and C x T with tensor parallelism), each on its
// own CPU device and thread holding its two sequence chunks of every sample, reproduce the whole
// model's per-token losses (at their global positions) and, summed over the context ranks, every
// parameter's gradient: GPT-2 (learned positions) and Llama (RoPE, RMSNorm, SwiGLU, GQA), dropout
// on. The attention ring alone equals whole-sequence attention on each rank's rows.
#include <mutex>
#include <tuple>

#include "actors/fabric/collective_groups.hpp"
#include "model/context_parallel.hpp"
#include "model/gpt_chunk.hpp"
#include "model/train/optimizer.hpp"
#include "tests/model/context_rows.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama };

GptConfig tiny(Family f) {
  GptConfig c = f == kLlama ? GptConfig::llama_style(2, 32, 4, 2, 48) : GptConfig::gpt2_124m();
  if (f == kGpt2) {
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
  }
  c.seq_length = 16;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;  // the masks follow the global rows: the same as the whole model's
  c.attention_dropout = 0.0f;
  return c;
}

struct Result {
  Tensor losses;           // f32 [B * T], global token order
  Tensor grads;            // f32 [P] (tensor parallelism: unused)
  double grad_sum_sq = 0;  // the optimizers' gradient statistics
};

constexpr int64_t kBatch = 2;

Result run_whole(const GptConfig& c, const Tensor& tokens, const Tensor& targets, float scale) {
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(5);
  ActivationsPtr a =
      model.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = scale, .dropout_seed = 9});
  Result r{Tensor::host(DType::f32, {a->losses.numel()}), Tensor::host(DType::f32, {model.layout().size()})};
  copy(cpu(), a->losses, r.losses);
  model.backward(*a, Tensor(), Tensor());
  copy(cpu(), model.grads().slice(0, {model.layout().size()}), r.grads);
  r.grad_sum_sq = Optimizer(model, {}).grad_stats().sum_sq;
  return r;
}

// C context ranks x T tensor ranks (tensor fastest, as RankLayout numbers them).
Result run_context_parallel(const GptConfig& c, int C, int T, bool sp, const Tensor& tokens, const Tensor& targets,
                            float scale) {
  const int64_t S = tokens.dim(1), local = S / C;
  Result r{Tensor::host(DType::f32, {tokens.numel()}), Tensor::host(DType::f32, {ParamLayout(c, {}).size()})};
  std::vector<std::vector<std::unique_ptr<Collectives>>> cp_groups, tp_groups;
  for (int t = 0; t < T; ++t) cp_groups.push_back(actors::make_cpu_group(C, {"cp", std::chrono::seconds(60)}));
  for (int k = 0; k < C; ++k) tp_groups.push_back(actors::make_cpu_group(T, {"tp", std::chrono::seconds(60)}));
  std::mutex mu;
  run_threads(C * T, [&](int id) {
    const int t = id % T, k = id / T;
    try {
      const Context ctx = Context::cpu();
      const TensorParallel tpar{{t, T}, sp, T > 1 ? tp_groups[size_t(k)][size_t(t)].get() : nullptr};
      GptChunk model(ctx, c, ChunkSpec::whole_model(), DType::f32, tpar);
      const ContextParallel cp{k, C, cp_groups[size_t(t)][size_t(k)].get()};
      model.set_context_parallel(cp);
      model.init_weights(5);
      ActivationsPtr a = model.forward(context_local_tokens(tokens, cp), context_local_tokens(targets, cp), Tensor(),
                                       {.training = true, .loss_grad_scale = scale, .dropout_seed = 9});
      model.backward(*a, Tensor(), Tensor());
      model.reduce_tensor_parallel_grads();
      cp.comm->all_reduce(ctx, model.grads());  // parameters are replicated over the context ranks
      const double sum_sq = Optimizer(model, {}).grad_stats().sum_sq;
      std::lock_guard lock(mu);
      if (k == 0) r.grad_sum_sq += sum_sq;
      if (t == 0) {
        const Tensor losses = to_host_f32(ctx, a->losses);
        for (int64_t b = 0; b < kBatch; ++b)
          for (int64_t i = 0; i < local; ++i)
            r.losses.data_as<float>()[b * S + context_position(cp, local, i)] = losses.data_as<float>()[b * local + i];
        if (T == 1 && k == 0) copy(cpu(), model.grads().slice(0, {r.grads.numel()}), r.grads);
      }
    } catch (...) {
      for (auto& g : cp_groups)
        for (auto& m : g) m->abort();
      for (auto& g : tp_groups)
        for (auto& m : g) m->abort();
      throw;
    }
  });
  return r;
}

std::string layout_name(const std::tuple<Family, int, int>& p) {
  const auto [family, C, T] = p;
  return str_cat(family == kGpt2 ? "gpt2" : "llama", "_CP", C, T > 1 ? str_cat("_TP", T, "_SP") : "");
}

class ContextParallelModel : public ::testing::TestWithParam<std::tuple<Family, int, int>> {};

TEST_P(ContextParallelModel, MatchesTheWholeModel) {
  const auto [family, C, T] = GetParam();
  const GptConfig c = tiny(family);
  const Tensor tokens = random_tokens({kBatch, c.seq_length}, 3, int32_t(c.vocab_size));
  Tensor targets = random_tokens({kBatch, c.seq_length}, 4, int32_t(c.vocab_size));
  targets.data_as<int32_t>()[5] = -1;  // an ignored position
  const float scale = 1.0f / float(targets.numel() - 1);
  const Result ref = run_whole(c, tokens, targets, scale);
  const Result got = run_context_parallel(c, C, T, T > 1, tokens, targets, scale);
  EXPECT_LT(rel_error(got.losses, ref.losses), 1e-5);
  EXPECT_NEAR(got.grad_sum_sq / ref.grad_sum_sq, 1.0, 1e-5);
  if (T > 1) return;  // sharded gradients: their norm above
  const ParamLayout whole(c, ChunkSpec::whole_model());
  for (const ParamInfo& p : whole.params()) {
    const Tensor a = got.grads.slice(p.offset, {p.numel()}), b = ref.grads.slice(p.offset, {p.numel()});
    EXPECT_LT(rel_error(a, b), 1e-5) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextParallelModel,
                         ::testing::Values(std::tuple(kGpt2, 2, 1), std::tuple(kGpt2, 4, 1), std::tuple(kGpt2, 2, 2),
                                           std::tuple(kLlama, 2, 1), std::tuple(kLlama, 4, 1),
                                           std::tuple(kLlama, 2, 2)),
                         [](const auto& info) { return layout_name(info.param); });

// The ring alone: each rank's rows of out, lse and dqkv equal those rows of the whole sequence's
// attention_forward / attention_backward (GQA, C = 2, 3 and 4; an odd C turns the double
// buffers an odd number of times), with the passes on ctx or on a pass context of their own.
class ContextAttentionRing : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ContextAttentionRing, EqualsWholeSequenceAttention) {
  const int C = std::get<0>(GetParam());
  const bool own_pass_ctx = std::get<1>(GetParam());
  const int64_t B = 2, T = 24, Tl = T / C;
  const AttentionConfig cfg{4, 2, 8};
  const int64_t W = (4 + 2 * 2) * 8, HD = 4 * 8;
  const Tensor qkv = random_normal({B, T, W}, 11, 1.5f), dout = random_normal({B, T, HD}, 12);
  Tensor out = Tensor::host(DType::f32, {B, T, HD}), lse = Tensor::host(DType::f32, {B, 4, T});
  Tensor dqkv = Tensor::host(DType::f32, qkv.shape());
  attention_forward(cpu(), qkv, cfg, out, lse);
  attention_backward(cpu(), dout, qkv, out, lse, cfg, dqkv);
  auto group = actors::make_cpu_group(C, {"cp", std::chrono::seconds(60)});
  run_threads(C, [&](int k) {
    const Context pass = Context::cpu();
    const ContextParallel cp{k, C, group[size_t(k)].get(), own_pass_ctx ? &pass : nullptr};
    const Tensor q = context_rows(cp, qkv, Tl, false), dy = context_rows(cp, dout, Tl, false);
    Tensor o = Tensor::host(DType::f32, {B, Tl, HD}), l = Tensor::host(DType::f32, {B, 4, Tl});
    Tensor dq = Tensor::host(DType::f32, q.shape());
    context_attention_forward(cpu(), cp, q, cfg, o, l);
    context_attention_backward(cpu(), cp, dy, q, o, l, cfg, dq);
    EXPECT_LT(rel_error(o, context_rows(cp, out, Tl, false)), 1e-5) << "rank " << k;
    EXPECT_LT(max_abs_diff(l, context_rows(cp, lse, Tl, true)), 1e-5) << "rank " << k;
    EXPECT_LT(rel_error(dq, context_rows(cp, dqkv, Tl, false)), 1e-5) << "rank " << k;
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, ContextAttentionRing, ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return str_cat("CP", std::get<0>(info.param),
                                          std::get<1>(info.param) ? "_pass_context" : "_passes_on_ctx");
                         });

TEST(ContextParallelSplit, LocalTokensAreChunksIAnd2CMinus1MinusI) {
  Tensor tokens = Tensor::host(DType::i32, {1, 8});
  for (int i = 0; i < 8; ++i) tokens.data_as<int32_t>()[i] = i;
  const Tensor local = context_local_tokens(tokens, {1, 2, nullptr});  // chunks 1 and 2 of 4
  ASSERT_EQ(local.numel(), 4);
  const std::vector<int32_t> expect{2, 3, 4, 5};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(local.data_as<int32_t>()[i], expect[size_t(i)]);
  const Tensor first = context_local_tokens(tokens, {0, 2, nullptr});  // chunks 0 and 3
  const std::vector<int32_t> expect0{0, 1, 6, 7};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(first.data_as<int32_t>()[i], expect0[size_t(i)]);
}

TEST(ContextParallelSplit, RefusesSequencesThatDoNotSplitInto2CChunks) {
  const Tensor tokens = Tensor::host(DType::i32, {1, 6});
  try {
    context_local_tokens(tokens, {0, 2, nullptr});
    FAIL() << "6 tokens into 4 chunks";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--seq-length (6)"), std::string::npos) << what;
    EXPECT_NE(what.find("--context-parallel-size"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace troupe::test
