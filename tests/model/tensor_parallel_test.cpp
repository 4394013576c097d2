// Tensor parallelism in the model: T chunks, each on its own CPU device and thread holding its
// ParamLayout shard, reproduce the whole model's per-token losses and every parameter's
// gradient (gathered into the global layout), with and without sequence parallelism and for
// GPT-2, Llama and Qwen3 (vocabulary-parallel embedding and cross-entropy, heads and MLP split,
// the q/k norms' replicated weights summed over the ranks' heads).
#include <mutex>

#include "actors/fabric/collective_groups.hpp"
#include "model/gpt_chunk.hpp"
#include "model/train/optimizer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama, kQwen3 };

// Qwen3: Llama-style with q/k norms (replicated weights, each rank normalizing its own heads), a
// head dimension (16) apart from hidden / heads (8) and a tied output layer.
GptConfig tiny(Family f) {
  const bool llama = f != kGpt2;
  GptConfig c = llama ? GptConfig::llama_style(2, 32, 4, 2, 48) : GptConfig::gpt2_124m();
  if (f == kQwen3) {
    c.kv_channels = 16;
    c.qk_layernorm = true;
    c.untie_embeddings_and_output_weights = false;
  }
  if (!llama) {
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
  }
  c.seq_length = 8;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 8;  // 56 for one rank, 64 for two, 64 for four: padding exists
  c.hidden_dropout = 0.1f;             // the dropout masks of sharded rows must match too
  c.attention_dropout = 0.0f;
  return c;
}

struct Result {
  Tensor losses;           // f32 [N]
  Tensor grads;            // f32, the whole model's layout
  double grad_sum_sq = 0;  // the optimizers' gradient statistics, summed over ranks
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

Result run_sharded(const GptConfig& c, int T, bool sp, const Tensor& tokens, const Tensor& targets, float scale) {
  const ParamLayout whole(c, ChunkSpec::whole_model());
  Result r{Tensor::host(DType::f32, {tokens.numel()}), Tensor::host(DType::f32, {whole.size()})};
  fill_zero(cpu(), r.grads);
  auto group = actors::make_cpu_group(T, {"tp", std::chrono::seconds(60)});
  std::mutex mu;
  run_threads(T, [&](int t) {
    try {
      const Context ctx = Context::cpu();
      GptChunk model(ctx, c, ChunkSpec::whole_model(), DType::f32, {{t, T}, sp, group[size_t(t)].get()});
      model.init_weights(5);
      ActivationsPtr a =
          model.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = scale, .dropout_seed = 9});
      model.backward(*a, Tensor(), Tensor());
      model.reduce_tensor_parallel_grads();
      const double sum_sq = Optimizer(model, {}).grad_stats().sum_sq;  // replicated parameters on rank 0 only
      std::lock_guard lock(mu);
      r.grad_sum_sq += sum_sq;
      if (t == 0) copy(cpu(), a->losses, r.losses);
      for (const ParamInfo& p : model.layout().params()) {
        const ParamInfo& dst = whole.find(p.name);
        shard_to_global(p, model.grads().data_as<float>() + p.offset, r.grads.data_as<float>() + dst.offset,
                        dst.global_shape[0]);
      }
    } catch (...) {
      for (auto& g : group) g->abort();  // the other ranks stop waiting for this one
      throw;
    }
  });
  return r;
}

class TensorParallel : public ::testing::TestWithParam<std::tuple<Family, int, bool>> {};

TEST_P(TensorParallel, MatchesTheWholeModel) {
  const auto [family, T, sp] = GetParam();
  const GptConfig c = tiny(family);
  const Tensor tokens = random_tokens({kBatch, c.seq_length}, 3, int32_t(c.vocab_size));
  Tensor targets = random_tokens({kBatch, c.seq_length}, 4, int32_t(c.vocab_size));
  targets.data_as<int32_t>()[2] = -1;  // an ignored position
  const float scale = 1.0f / float(targets.numel() - 1);
  const Result ref = run_whole(c, tokens, targets, scale);
  const Result got = run_sharded(c, T, sp, tokens, targets, scale);
  EXPECT_LT(rel_error(got.losses, ref.losses), 1e-6);
  // The global norm counts every parameter once (sharded ones on every rank, replicated on one).
  EXPECT_NEAR(got.grad_sum_sq / ref.grad_sum_sq, 1.0, 1e-5);
  // Per parameter, so a failure names the one that is wrong.
  const ParamLayout whole(c, ChunkSpec::whole_model());
  for (const ParamInfo& p : whole.params()) {
    const Tensor a = got.grads.slice(p.offset, {p.numel()}), b = ref.grads.slice(p.offset, {p.numel()});
    EXPECT_LT(rel_error(a, b), 1e-5) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallel,
                         ::testing::Values(std::tuple(kGpt2, 2, false), std::tuple(kGpt2, 2, true),
                                           std::tuple(kGpt2, 4, false), std::tuple(kGpt2, 4, true),
                                           std::tuple(kLlama, 2, false), std::tuple(kLlama, 2, true),
                                           std::tuple(kQwen3, 2, false), std::tuple(kQwen3, 2, true)),
                         [](const auto& info) {
                           const Family f = std::get<0>(info.param);
                           return str_cat(f == kGpt2    ? "gpt2"
                                          : f == kLlama ? "llama"
                                                        : "qwen3",
                                          "_TP", std::get<1>(info.param), std::get<2>(info.param) ? "_SP" : "");
                         });

TEST(TensorParallelLayout, RefusesShapesThatDoNotSplit) {
  GptConfig c = tiny(kGpt2);
  c.num_attention_heads = 4;
  try {
    [[maybe_unused]] const ParamLayout layout(c, ChunkSpec::whole_model(), {0, 8});
    FAIL() << "8 ranks for 4 heads";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--num-attention-heads (4) must be divisible by --tensor-model-parallel-size (8)"),
        std::string::npos)
        << e.what();
  }
}

TEST(TensorParallelLayout, ShardsRoundTripThroughTheGlobalTensor) {
  const GptConfig c = tiny(kLlama);  // SwiGLU [gate; up] and grouped-query QKV: several pieces per shard
  const ParamLayout whole(c, ChunkSpec::whole_model());
  Tensor global = Tensor::host(DType::f32, {whole.size()});
  init_params(whole, 5, global);
  Tensor back = Tensor::host(DType::f32, {whole.size()});
  fill_zero(cpu(), back);
  for (int t = 0; t < 2; ++t) {
    const ParamLayout shard(c, ChunkSpec::whole_model(), {t, 2});
    Tensor mine = Tensor::host(DType::f32, {shard.size()});
    init_params(shard, 5, mine);  // a shard's init is its part of the global init
    for (const ParamInfo& p : shard.params()) {
      const ParamInfo& g = whole.find(p.name);
      // Rows past the one-rank vocabulary padding (56 of the two-rank 64) are padding of the
      // wider table: not in `global`, so they keep the shard's own values.
      std::vector<float> cut(mine.data_as<float>() + p.offset, mine.data_as<float>() + p.offset + p.numel());
      shard_from_global(p, global.data_as<float>() + g.offset, cut.data(), g.global_shape[0]);
      for (int64_t i = 0; i < p.numel(); ++i)
        ASSERT_EQ(cut[size_t(i)], mine.data_as<float>()[p.offset + i]) << p.name << " element " << i;
      shard_to_global(p, mine.data_as<float>() + p.offset, back.data_as<float>() + g.offset, g.global_shape[0]);
    }
  }
  EXPECT_EQ(max_abs_diff(back, global), 0.0);
}

}  // namespace
}  // namespace troupe::test
