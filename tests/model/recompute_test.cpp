// Activation recomputation (model/recompute.hpp) on CPU chunks of GPT-2, Llama and Qwen3 shapes
// with dropout on:
// - every setting (full uniform and block, selective modules alone and together) gives the same
//   losses and gradients, bit for bit, as no recompute, with two microbatches in flight (forward
//   0, forward 1, backward 0, backward 1: the shared workspace must be written again for 0);
// - each setting holds exactly the bytes per microbatch it should not hold any more, fewer;
// - the flags' conflicts are errors naming the flag.
#include <cstring>

#include "model/gpt_chunk.hpp"
#include "model/recompute.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum class Family { gpt2, llama, qwen3 };

GptConfig tiny(Family f) {
  GptConfig c = f == Family::gpt2 ? GptConfig::gpt2_124m() : GptConfig::llama_style(4, 32, 4, 2, 48);
  if (f == Family::gpt2) {
    c.num_layers = 4;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
  }
  if (f == Family::qwen3) {  // q/k norms, a head dimension apart from hidden / heads
    c.kv_channels = 16;
    c.qk_layernorm = true;
  }
  c.seq_length = 6;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;  // the recomputed forward must draw the same masks
  c.attention_dropout = 0.0f;
  return c;
}

struct Setting {
  const char* name;
  RecomputeFlags flags;
};

std::vector<Setting> settings() {
  auto full = [](const char* method, int n) {
    return RecomputeFlags{.granularity = "full", .method = method, .num_layers = n};
  };
  auto selective = [](std::vector<std::string> modules) {
    return RecomputeFlags{.granularity = "selective", .modules = std::move(modules)};
  };
  return {
      {"full_uniform_1", full("uniform", 1)},
      {"full_uniform_2", full("uniform", 2)},
      {"full_uniform_3", full("uniform", 3)},  // groups of 3 and 1
      {"full_block_1", full("block", 1)},
      {"full_block_4", full("block", 4)},  // every layer
      {"selective_default", {.recompute_activations = true}},
      {"selective_core_attn", selective({"core_attn"})},
      {"selective_layernorm", selective({"layernorm"})},
      {"selective_mlp", selective({"mlp"})},
      {"selective_core_attn_mlp", selective({"core_attn", "mlp"})},
      {"selective_layernorm_mlp", selective({"layernorm", "mlp"})},
      {"selective_all", selective({"core_attn", "layernorm", "mlp"})},
  };
}

constexpr int64_t kBatch = 2;

struct ChunkRun {
  std::vector<Tensor> losses;  // per microbatch, f32 [N]
  Tensor grads;                // host f32
  size_t bytes = 0;            // activations held per microbatch in flight
};

// Forward 0, forward 1, backward 0, backward 1 on a whole-model chunk.
ChunkRun run_chunk(const GptConfig& c, const RecomputeConfig& recompute) {
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32, {}, 1, recompute);
  model.init_weights(3);
  ChunkRun r;
  std::vector<ActivationsPtr> acts;
  for (int m = 0; m < 2; ++m) {
    const Tensor tokens = random_tokens({kBatch, c.seq_length}, 11 + m, int32_t(c.vocab_size));
    const Tensor targets = random_tokens({kBatch, c.seq_length}, 21 + m, int32_t(c.vocab_size));
    acts.push_back(model.forward(tokens, targets, Tensor(),
                                 {.training = true, .loss_grad_scale = 0.1f, .dropout_seed = 7 + uint64_t(m)}));
    r.bytes = acts.back()->bytes();
  }
  for (ActivationsPtr& a : acts) {
    model.backward(*a, Tensor(), Tensor());
    Tensor loss = Tensor::host(DType::f32, a->losses.shape());
    copy(cpu(), a->losses, loss);
    r.losses.push_back(loss);
    model.release(std::move(a));
  }
  r.grads = Tensor::host(DType::f32, model.grads().shape());
  copy(cpu(), model.grads(), r.grads);
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The bytes a layer's recomputed tensors take per microbatch, from the shapes (f32 everywhere).
size_t recomputed_bytes(const GptConfig& c, const RecomputedTensors& t) {
  const int64_t N = kBatch * c.seq_length, C = c.hidden_size, D = c.head_dim();
  const int64_t H = c.num_attention_heads, G = c.query_groups();
  const int64_t F = c.ffn(), fc1 = c.swiglu ? 2 * F : F;
  int64_t floats = 0;
  if (t.input) floats += N * C;
  if (t.ln1) floats += N * C + 2 * N;
  if (t.qkv) floats += N * (H + 2 * G) * D + (c.qk_layernorm ? N * (H + G) * D + N * H + N * G : 0);
  if (t.core_attn) floats += N * H * D + kBatch * H * c.seq_length;
  if (t.x_mid) floats += N * C;
  if (t.ln2) floats += N * C + 2 * N;
  if (t.mlp) floats += N * fc1 + N * F;
  return size_t(floats) * 4;
}

class Recompute : public ::testing::TestWithParam<std::tuple<Family, int>> {};

TEST_P(Recompute, SameBitsAsNoRecomputeWithFewerBytesHeld) {
  const auto [family, index] = GetParam();
  const GptConfig c = tiny(family);
  const Setting setting = settings()[size_t(index)];
  const RecomputeConfig config = recompute_config_from_flags(setting.flags);
  ASSERT_TRUE(config.enabled());

  const ChunkRun reference = run_chunk(c, {});
  const ChunkRun recomputed = run_chunk(c, config);
  for (size_t m = 0; m < 2; ++m)
    EXPECT_TRUE(same_bits(recomputed.losses[m], reference.losses[m])) << "losses of microbatch " << m;
  EXPECT_TRUE(same_bits(recomputed.grads, reference.grads))
      << "gradients differ: max abs difference " << max_abs_diff(recomputed.grads, reference.grads);

  // What the plan says is not held is exactly what is no longer held.
  size_t saved = 0;
  for (const LayerRecompute& p : recompute_plan(config, c.num_layers)) saved += recomputed_bytes(c, p.tensors);
  EXPECT_GT(saved, 0u);
  EXPECT_EQ(recomputed.bytes + saved, reference.bytes);
  std::printf("%-8s %-24s activations per microbatch: %zu bytes (%.0f%% of %zu without recompute)\n",
              family == Family::gpt2    ? "gpt2"
              : family == Family::llama ? "llama"
                                        : "qwen3",
              setting.name, recomputed.bytes, 100.0 * double(recomputed.bytes) / double(reference.bytes),
              reference.bytes);
}

INSTANTIATE_TEST_SUITE_P(Settings, Recompute,
                         ::testing::Combine(::testing::Values(Family::gpt2, Family::llama, Family::qwen3),
                                            ::testing::Range(0, int(settings().size()))),
                         [](const auto& info) {
                           const Family f = std::get<0>(info.param);
                           return std::string(f == Family::gpt2    ? "Gpt2_"
                                              : f == Family::llama ? "Llama_"
                                                                   : "Qwen3_") +
                                  settings()[size_t(std::get<1>(info.param))].name;
                         });

// Megatron's grouping: uniform groups of N from the chunk's first layer (the last one shorter),
// block the first N layers one by one.
TEST(RecomputePlan, GroupsAndKeptInputsFollowMegatron) {
  const auto uniform =
      recompute_plan(recompute_config_from_flags({.granularity = "full", .method = "uniform", .num_layers = 2}), 5);
  const int begins[] = {0, 0, 2, 2, 4}, ends[] = {2, 2, 4, 4, 5};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(uniform[size_t(i)].full);
    EXPECT_EQ(uniform[size_t(i)].group_begin, begins[i]) << i;
    EXPECT_EQ(uniform[size_t(i)].group_end, ends[i]) << i;
    EXPECT_EQ(uniform[size_t(i)].tensors.input, i % 2 == 1) << i;  // each group's input is kept
  }
  // A group longer than the chunk is the whole chunk.
  const auto whole =
      recompute_plan(recompute_config_from_flags({.granularity = "full", .method = "uniform", .num_layers = 8}), 3);
  EXPECT_EQ(whole[2].group_begin, 0);
  EXPECT_EQ(whole[2].group_end, 3);

  const auto block =
      recompute_plan(recompute_config_from_flags({.granularity = "full", .method = "block", .num_layers = 2}), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(block[size_t(i)].full, i < 2) << i;
    EXPECT_EQ(block[size_t(i)].tensors.any(), i < 2) << i;
    EXPECT_FALSE(block[size_t(i)].tensors.input) << i;
  }
  const auto capped =  // more than the chunk's layers (a short chunk of an uneven split): all of them
      recompute_plan(recompute_config_from_flags({.granularity = "full", .method = "block", .num_layers = 8}), 3);
  for (const LayerRecompute& p : capped) EXPECT_TRUE(p.full);
  const auto selective = recompute_plan(recompute_config_from_flags({.recompute_activations = true}), 3);
  for (const LayerRecompute& p : selective) {
    EXPECT_FALSE(p.full);
    EXPECT_TRUE(p.tensors.core_attn);
    EXPECT_FALSE(p.tensors.ln1 || p.tensors.ln2 || p.tensors.mlp || p.tensors.qkv || p.tensors.x_mid);
  }
}

void expect_refused(const RecomputeFlags& flags, const std::string& named, int chunk_layers = 4) {
  try {
    check_recompute(recompute_config_from_flags(flags), chunk_layers);
    ADD_FAILURE() << "expected an error naming " << named;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
}

TEST(RecomputeFlags, ConflictsAreErrorsNamingTheFlag) {
  expect_refused({.granularity = "selective", .method = "uniform"}, "--recompute-method uniform needs");
  expect_refused({.recompute_activations = true, .method = "block"}, "--recompute-method block needs");
  expect_refused({.method = "uniform", .num_layers = 1}, "--recompute-method uniform needs");
  expect_refused({.granularity = "selective", .num_layers = 1}, "--recompute-num-layers 1 needs");
  expect_refused({.num_layers = 2}, "--recompute-num-layers 2 needs");
  expect_refused({.granularity = "full", .method = "uniform"}, "--recompute-granularity full needs --recompute-num");
  expect_refused({.granularity = "full", .num_layers = 1}, "--recompute-granularity full needs --recompute-method");
  expect_refused({.granularity = "full", .method = "uniform", .num_layers = 0}, "--recompute-num-layers must be");
  expect_refused({.granularity = "full", .method = "block", .num_layers = 5}, "--recompute-num-layers 5");
  expect_refused({.granularity = "full", .method = "diagonal", .num_layers = 1}, "--recompute-method diagonal");
  expect_refused({.granularity = "partial"}, "--recompute-granularity partial");
  expect_refused({.recompute_activations = true, .granularity = "full"}, "--recompute-activations");
  expect_refused({.granularity = "full", .method = "uniform", .num_layers = 1, .modules = {"mlp"}},
                 "--recompute-modules needs");
  expect_refused({.modules = {"core_attn"}}, "--recompute-modules needs");
  for (const char* moe : {"moe", "moe_act", "shared_experts"})
    expect_refused({.granularity = "selective", .modules = {"core_attn", moe}},
                   std::string("--recompute-modules ") + moe + ": mixture of experts");
  expect_refused({.granularity = "selective", .modules = {"mla_up_proj"}}, "--recompute-modules mla_up_proj");
  expect_refused({.granularity = "selective", .modules = {"attention"}}, "--recompute-modules attention");
  // Accepted: block over every layer of the chunk, uniform over more (the whole chunk).
  EXPECT_NO_THROW(
      check_recompute(recompute_config_from_flags({.granularity = "full", .method = "block", .num_layers = 4}), 4));
  EXPECT_NO_THROW(
      check_recompute(recompute_config_from_flags({.granularity = "full", .method = "uniform", .num_layers = 9}), 4));
  EXPECT_FALSE(recompute_config_from_flags({}).enabled());
}

}  // namespace
}  // namespace troupe::test
