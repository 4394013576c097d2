// Mixture-of-experts models in the inference model on the CPU (f32) against the training forward
// (GptChunk) on the same flat weights: a Qwen-MoE-like model (RMSNorm, RoPE, SwiGLU, 4 experts
// top-2, a shared expert with its gate; layers 0 and 2 MoE, layer 1 dense) and a GPT-2-like one
// (LayerNorm, learned positions, GELU, no biases, every layer MoE). A prompt's logits, decode
// steps on the KV cache, and a mixed batch of prefills and decode steps where each sequence gets
// the logits it gets alone (dropless routing is per token). A sigmoid router with a learned
// expert bias (aux-loss-free balancing) loaded from outside. And what generate/serve refuse.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_chunk.hpp"
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kQwenMoe, kGpt2Moe };

const char* family_name(Family f) { return f == kQwenMoe ? "qwen_moe" : "gpt2_moe"; }

GptConfig tiny_moe(Family f) {
  GptConfig c = tiny_inference_config(f == kQwenMoe, 32, 24, 50);
  c.disable_bias_linear = true;
  c.moe.num_experts = 4;
  c.moe.moe_router_topk = 2;
  c.moe.moe_ffn_hidden_size = 16;
  if (f == kQwenMoe) {
    c.num_layers = 3;
    c.moe.moe_layer_freq = parse_moe_layer_freq("[1,0,1]");
    c.moe.moe_shared_expert_intermediate_size = 24;
    c.moe.moe_shared_expert_gate = true;
  } else {
    c.moe.moe_router_score_function = MoeScoreFunction::sigmoid;
    c.moe.moe_router_topk_scaling_factor = 2.0f;
  }
  c.validate();
  return c;
}

// Random weights everywhere (norm weights and the router too, so every path counts).
Tensor weights(const GptConfig& c) { return random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 5, 0.3f); }

// The training forward's logits [T, Vp] for one sequence.
Tensor chunk_logits(const GptConfig& c, const Tensor& w, const std::vector<int32_t>& tokens) {
  GptChunk chunk(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  chunk.load_weights(w);
  ActivationsPtr a =
      chunk.forward(host_i32(tokens, {1, int64_t(tokens.size())}), Tensor(), Tensor(), {.training = false});
  Tensor out = Tensor::host(DType::f32, a->logits.shape());
  copy(cpu(), a->logits, out);
  return out;
}

// Row r of [S, V] logits, copied (the model's logits are overwritten by its next forward).
Tensor row(const Tensor& logits, int64_t r) {
  Tensor out = Tensor::host(DType::f32, {logits.dim(1)});
  copy(cpu(), logits.slice(r * logits.dim(1), {logits.dim(1)}), out);
  return out;
}

class InferenceMoeVsTraining : public ::testing::TestWithParam<Family> {
 protected:
  InferenceMoeVsTraining() : c_(tiny_moe(GetParam())), w_(weights(c_)) {}
  // A fresh model and cache: nothing left over from another forward.
  std::unique_ptr<InferenceModel> model() const {
    auto m = std::make_unique<InferenceModel>(cpu(), c_, DType::f32,
                                              InferenceModelOptions{.max_tokens = 64, .max_sequences = 4});
    m->load_weights(w_);
    return m;
  }
  GptConfig c_;
  Tensor w_;
};

TEST_P(InferenceMoeVsTraining, PromptLogitsMatch) {
  const std::vector<int32_t> tokens = random_token_list(11, 1, int32_t(c_.vocab_size));
  const Tensor ref = chunk_logits(c_, w_, tokens);
  auto m = model();
  KvCache cache(cpu(), c_, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(cache.blocks_for(11), blocks));
  const Tensor logits = m->forward(std::vector<SequenceInput>{{tokens, 0, blocks}}, cache);
  ASSERT_EQ(logits.shape(), (Shape{1, c_.padded_vocab_size()}));
  const double err = rel_error(row(logits, 0), row(ref, 10));
  std::printf("%s prompt: rel err %.2e\n", family_name(GetParam()), err);
  EXPECT_LT(err, 1e-5);
}

TEST_P(InferenceMoeVsTraining, DecodeStepByStepMatchesFullForward) {
  const int64_t T = 19, prefill = 3;
  const std::vector<int32_t> tokens = random_token_list(T, 2, int32_t(c_.vocab_size));
  const Tensor ref = chunk_logits(c_, w_, tokens);
  auto m = model();
  KvCache cache(cpu(), c_, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(cache.blocks_for(T), blocks));
  double worst =
      rel_error(row(m->forward(std::vector<SequenceInput>{{std::span(tokens).first(prefill), 0, blocks}}, cache), 0),
                row(ref, prefill - 1));
  for (int64_t t = prefill; t < T; ++t) {
    const std::vector<SequenceInput> batch{{std::span(tokens).subspan(size_t(t), 1), t, blocks}};
    worst = std::max(worst, rel_error(row(m->forward(batch, cache), 0), row(ref, t)));
  }
  std::printf("%s decode: max rel err %.2e\n", family_name(GetParam()), worst);
  EXPECT_LT(worst, 1e-5);
}

TEST_P(InferenceMoeVsTraining, MixedBatchGivesEachSequenceItsLogitsAlone) {
  // a decodes (9 tokens cached), b is a whole prefill, d a second prefill chunk (5 cached).
  const int32_t V = int32_t(c_.vocab_size);
  const std::vector<int32_t> a = random_token_list(10, 3, V), b = random_token_list(7, 4, V),
                             d = random_token_list(13, 6, V);
  // Each sequence alone: its own model and cache, the same steps.
  auto alone = [&](const std::vector<int32_t>& s, int64_t cached) {
    auto m = model();
    KvCache cache(cpu(), c_, DType::f32, 8, 4);
    std::vector<int32_t> blocks;
    EXPECT_TRUE(cache.allocate(4, blocks));
    if (cached > 0) m->forward(std::vector<SequenceInput>{{std::span(s).first(size_t(cached)), 0, blocks}}, cache);
    return row(m->forward(std::vector<SequenceInput>{{std::span(s).subspan(size_t(cached)), cached, blocks}}, cache),
               0);
  };
  auto m = model();
  KvCache cache(cpu(), c_, DType::f32, 16, 4);
  std::vector<int32_t> ba, bb, bd;
  ASSERT_TRUE(cache.allocate(3, ba) && cache.allocate(2, bb) && cache.allocate(4, bd));
  m->forward(std::vector<SequenceInput>{{std::span(a).first(9), 0, ba}, {std::span(d).first(5), 0, bd}}, cache);
  const std::vector<SequenceInput> mixed{{std::span(a).last(1), 9, ba}, {b, 0, bb}, {std::span(d).last(8), 5, bd}};
  const Tensor logits = m->forward(mixed, cache);
  const double ea = rel_error(row(logits, 0), alone(a, 9)), eb = rel_error(row(logits, 1), alone(b, 0)),
               ed = rel_error(row(logits, 2), alone(d, 5));
  const double ta = rel_error(row(logits, 0), row(chunk_logits(c_, w_, a), 9));
  const double td = rel_error(row(logits, 2), row(chunk_logits(c_, w_, d), 12));
  std::printf("%s mixed vs alone: rel err %.2e %.2e %.2e; vs training %.2e %.2e\n", family_name(GetParam()), ea, eb, ed,
              ta, td);
  EXPECT_LT(ea, 1e-6);
  EXPECT_LT(eb, 1e-6);
  EXPECT_LT(ed, 1e-6);
  EXPECT_LT(ta, 1e-5);
  EXPECT_LT(td, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, InferenceMoeVsTraining, ::testing::Values(kQwenMoe, kGpt2Moe),
                         [](const auto& info) { return family_name(info.param); });

// The refusal's message, or "" when `make` does not throw.
template <typename F>
std::string refusal(F make) {
  try {
    make();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sigmoid scores with an expert bias that moves the routing: the inference model with the bias
// loaded gives the training forward's logits (its state holding the same bias), and without it
// refuses to run, naming the flag.
TEST(InferenceMoeExpertBias, LoadedBiasRoutesAsInTraining) {
  GptConfig c = tiny_moe(kGpt2Moe);
  c.moe.moe_router_enable_expert_bias = true;
  c.validate();
  const Tensor w = weights(c);
  const std::vector<int32_t> tokens = random_token_list(11, 7, int32_t(c.vocab_size));
  std::vector<Tensor> bias;  // per layer, host f32 [E]: large enough to change the top-2
  for (int l = 0; l < c.num_layers; ++l) bias.push_back(random_normal({c.moe.num_experts}, 40 + uint64_t(l), 1.0f));

  GptChunk chunk(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  chunk.load_weights(w);
  const std::vector<std::pair<std::string, Tensor>> buffers = chunk.moe_buffers();
  ASSERT_EQ(buffers.size(), size_t(c.num_layers));
  auto training_logits = [&] {
    ActivationsPtr a = chunk.forward(host_i32(tokens, {1, 11}), Tensor(), Tensor(), {.training = false});
    return row(a->logits, 10);
  };
  const Tensor unbiased = training_logits();
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ(buffers[size_t(l)].first, "decoder.layers." + std::to_string(l) + ".mlp.router.expert_bias");
    copy(cpu(), bias[size_t(l)], buffers[size_t(l)].second);
  }
  const Tensor ref = training_logits();
  ASSERT_GT(rel_error(ref, unbiased), 1e-3) << "the bias should move the routing";

  InferenceModel m(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 4});
  m.load_weights(w);
  KvCache cache(cpu(), c, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(cache.blocks_for(11), blocks));
  const std::vector<SequenceInput> batch{{tokens, 0, blocks}};
  const std::string missing = refusal([&] { m.forward(batch, cache); });
  EXPECT_NE(missing.find("--moe-router-enable-expert-bias"), std::string::npos) << missing;
  for (int l = 0; l < c.num_layers; ++l) m.load_expert_bias(l, bias[size_t(l)]);
  const double err = rel_error(row(m.forward(batch, cache), 0), ref);
  std::printf("expert bias prompt: rel err %.2e\n", err);
  EXPECT_LT(err, 1e-5);
}

TEST(InferenceMoeChecks, RefusesWhatItCannotServeExactlyNamingTheFlag) {
  GptConfig dropping = tiny_moe(kQwenMoe);
  dropping.moe.moe_expert_capacity_factor = 1.25;
  dropping.validate();
  const std::string capacity =
      refusal([&] { InferenceModel m(cpu(), dropping, DType::f32, {.max_tokens = 8, .max_sequences = 2}); });
  EXPECT_NE(capacity.find("--moe-expert-capacity-factor"), std::string::npos) << capacity;

  const GptConfig c = tiny_moe(kQwenMoe);
  const std::string tp = refusal([&] {
    InferenceModel m(cpu(), c, DType::f32, {.max_tokens = 8, .max_sequences = 2}, {{0, 2}, false, nullptr});
  });
  EXPECT_NE(tp.find("--tensor-model-parallel-size 2"), std::string::npos) << tp;
  EXPECT_NE(tp.find("--num-experts 4"), std::string::npos) << tp;
  EXPECT_NE(refusal([&] { check_inference_moe(c, 2); }).find("--tensor-model-parallel-size"), std::string::npos);
  EXPECT_EQ(refusal([&] { check_inference_moe(c, 1); }), "");
  EXPECT_EQ(refusal([&] { check_inference_moe(tiny_inference_config(true, 32, 24, 50), 2); }), "");  // dense
}

}  // namespace
}  // namespace troupe::test
