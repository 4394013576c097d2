// The MoE block wired into the GPT chunk on the CPU (f32):
// - the whole model's objective (mean token loss plus the routers' aux and z losses) against
//   finite differences on the router, an expert and the shared expert;
// - one expert, top-1, no router loss: the same loss and gradients as the dense model with the
//   same weights (an MoE layer next to a dense one);
// - the parameter names and count, the config's JSON, what the chunk refuses, and the expert bias
//   update at the optimizer step.
#include <cmath>

#include <nlohmann/json.hpp>

#include "model/config_moe.hpp"
#include "model/gpt_chunk.hpp"
#include "model/train/optimizer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

GptConfig tiny_moe() {
  GptConfig c = GptConfig::llama_style(2, 16, 2, 1, 32);
  c.seq_length = 6;
  c.vocab_size = 40;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  c.init_method_std = 0.2f;  // gradients well above finite-difference noise
  c.moe.num_experts = 4;
  c.moe.moe_router_topk = 2;
  c.moe.moe_aux_loss_coeff = 0.5f;  // large: the router's gradient is mostly the aux loss's
  c.moe.moe_z_loss_coeff = 0.1f;
  c.moe.moe_shared_expert_intermediate_size = 16;
  return c;
}

struct Inputs {
  Tensor tokens, targets;
  int64_t counted = 0;
};

Inputs make_inputs(const GptConfig& c, uint64_t seed) {
  Inputs in{random_tokens({2, c.seq_length}, seed, int32_t(c.vocab_size)),
            random_tokens({2, c.seq_length}, seed + 1, int32_t(c.vocab_size))};
  in.counted = in.targets.numel();
  return in;
}

// The objective backward differentiates: scale * sum(token losses) + moe_scale * router losses.
double objective(GptChunk& m, const Inputs& in, float scale, float moe_scale) {
  ActivationsPtr a = m.forward(in.tokens, in.targets, Tensor(),
                               {.training = true, .loss_grad_scale = scale, .moe_loss_grad_scale = moe_scale});
  double s = 0;
  for (int64_t i = 0; i < a->losses.numel(); ++i) s += double(a->losses.data_as<float>()[i]) * scale;
  for (const LayerActivations& l : a->layers) s += double(moe_scale) * l.moe.stats.losses.total();
  m.release(std::move(a));
  return s;
}

TEST(MoeGptChunk, GradientsOfLossAndRouterLossesMatchFiniteDifferences) {
  const GptConfig c = tiny_moe();
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(5);
  // A wider router: routing gaps large against the probes, so no probe changes the choices.
  for (int l = 0; l < c.num_layers; ++l) {
    const Tensor r = model.layout().view(model.params(), "decoder.layers." + std::to_string(l) + ".mlp.router.weight");
    const Tensor w = random_normal(r.shape(), 40 + uint64_t(l), 1.5f);
    std::copy_n(w.data_as<float>(), w.numel(), r.data_as<float>());
  }
  const Inputs in = make_inputs(c, 9);
  const float scale = 1.0f / float(in.counted), moe_scale = 0.5f;

  ActivationsPtr a = model.forward(in.tokens, in.targets, Tensor(),
                                   {.training = true, .loss_grad_scale = scale, .moe_loss_grad_scale = moe_scale});
  ASSERT_GT(a->layers[0].moe.stats.losses.aux_loss, 0.0);
  ASSERT_GT(a->layers[0].moe.stats.losses.z_loss, 0.0);
  model.backward(*a, Tensor(), Tensor());
  model.release(std::move(a));

  for (const char* name :
       {"decoder.layers.0.mlp.router.weight", "decoder.layers.1.mlp.router.weight",
        "decoder.layers.1.mlp.experts.2.linear_fc1.weight", "decoder.layers.0.mlp.experts.0.linear_fc2.weight",
        "decoder.layers.0.mlp.shared_experts.linear_fc1.weight", "decoder.layers.1.pre_mlp_layernorm.weight"}) {
    const Tensor w = model.layout().view(model.params(), name), g = model.layout().view(model.grads(), name);
    expect_grad_close(
        name, [&] { return objective(model, in, scale, moe_scale); }, w.view({w.numel()}), g.view({g.numel()}), 8,
        1e-2f, 3e-2, 2e-4);
  }
}

// One expert and top-1 (pre-softmax: its weight is 1): each MoE layer is the dense MLP.
TEST(MoeGptChunk, OneExpertTopOneIsTheDenseModel) {
  GptConfig dense = tiny_moe();
  dense.moe = MoeConfig{};
  GptConfig moe = tiny_moe();
  moe.moe = MoeConfig{};
  moe.moe.num_experts = 1;
  moe.moe.moe_router_topk = 1;
  moe.moe.moe_router_pre_softmax = true;
  moe.moe.moe_layer_freq.every = 2;  // layer 0 MoE, layer 1 dense
  ASSERT_TRUE(moe.is_moe_layer(0));
  ASSERT_FALSE(moe.is_moe_layer(1));

  GptChunk d(cpu(), dense, ChunkSpec::whole_model(), DType::f32), m(cpu(), moe, ChunkSpec::whole_model(), DType::f32);
  d.init_weights(8);
  m.init_weights(9);  // the router keeps its own (any) weights
  auto same = [](const std::string& name) {
    const std::string p = "decoder.layers.0.mlp.";
    if (name == p + "linear_fc1.weight") return moe_expert_name(p, 0, "linear_fc1");
    if (name == p + "linear_fc2.weight") return moe_expert_name(p, 0, "linear_fc2");
    return name;
  };
  for (const ParamInfo& p : d.layout().params()) {
    const Tensor from = d.layout().view(d.params(), p.name), to = m.layout().view(m.params(), same(p.name));
    std::copy_n(from.data_as<float>(), from.numel(), to.data_as<float>());
  }
  const Inputs in = make_inputs(dense, 12);
  const float scale = 1.0f / float(in.counted);
  double loss[2];
  GptChunk* models[2] = {&d, &m};
  for (int k = 0; k < 2; ++k) {
    ActivationsPtr a =
        models[k]->forward(in.tokens, in.targets, Tensor(), {.training = true, .loss_grad_scale = scale});
    loss[k] = 0;
    for (int64_t i = 0; i < a->losses.numel(); ++i) loss[k] += a->losses.data_as<float>()[i];
    models[k]->backward(*a, Tensor(), Tensor());
    models[k]->release(std::move(a));
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::abs(loss[0]));
  for (const ParamInfo& p : d.layout().params()) {
    const Tensor gd = d.layout().view(d.grads(), p.name), gm = m.layout().view(m.grads(), same(p.name));
    EXPECT_LT(max_abs_diff(gd, gm), 1e-6 + 1e-5 * std::sqrt(dot(gd, gd) / double(gd.numel()))) << p.name;
  }
  const Tensor router = m.layout().view(m.grads(), "decoder.layers.0.mlp.router.weight");
  EXPECT_EQ(dot(router, router), 0.0) << "one expert's weight is constant 1: no router gradient";
}

TEST(MoeGptChunk, ExpertsHaveGlobalNamesAndTheCountIsTheLayouts) {
  GptConfig c = tiny_moe();
  c.moe.moe_layer_freq = parse_moe_layer_freq("[0,1]");
  const ParamLayout layout(c, ChunkSpec::whole_model());
  EXPECT_TRUE(layout.has("decoder.layers.0.mlp.linear_fc1.weight"));
  EXPECT_FALSE(layout.has("decoder.layers.1.mlp.linear_fc1.weight"));
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(layout.find(moe_expert_name("decoder.layers.1.mlp.", e, "linear_fc1")).shape, (Shape{64, 16}));
    EXPECT_EQ(layout.find(moe_expert_name("decoder.layers.1.mlp.", e, "linear_fc2")).shape, (Shape{16, 32}));
  }
  EXPECT_EQ(layout.find("decoder.layers.1.mlp.router.weight").shape, (Shape{4, 16}));
  EXPECT_EQ(layout.find("decoder.layers.1.mlp.shared_experts.linear_fc1.weight").shape, (Shape{32, 16}));
  int64_t n = 0;
  for (const ParamInfo& p : layout.params()) n += p.numel();
  EXPECT_EQ(n, c.num_parameters());
  // A token runs through 2 of the 4 experts of the one MoE layer: FLOPs count the other 2 out.
  EXPECT_EQ(c.num_active_parameters(), c.num_parameters() - 2 * (64 * 16 + 16 * 32));
  GptConfig dense = c;
  dense.moe = {};
  EXPECT_EQ(dense.num_active_parameters(), dense.num_parameters());
  // Expert e's weights start where expert e - 1's end: one [E, F1, C] tensor.
  const LayerTensors w = layout.layer(Tensor::host(DType::f32, {layout.size()}), 1);
  EXPECT_EQ(w.moe.fc1.shape(), (Shape{4, 64, 16}));
  EXPECT_FALSE(w.fc1_w.defined());
}

TEST(MoeGptChunk, ConfigJsonRoundTrips) {
  GptConfig c = tiny_moe();
  c.moe.moe_layer_freq = parse_moe_layer_freq("([1]+[0])*1");
  c.moe.moe_expert_capacity_factor = 1.25;
  c.moe.moe_token_drop_policy = MoeTokenDropPolicy::position;
  const GptConfig back = gpt_config_from_json(to_json(c));
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_EQ(back.moe.moe_layer_freq.pattern, (std::vector<int>{1, 0}));
  EXPECT_FALSE(to_json(tiny_moe()).at("moe").is_null());
  GptConfig dense = tiny_moe();
  dense.moe = MoeConfig{};
  EXPECT_FALSE(to_json(dense).contains("moe")) << "a dense model's config is unchanged";
  nlohmann::json bad = to_json(c);
  bad["moe"]["moe_router_jitter"] = 1;
  try {
    gpt_config_from_json(bad);
    ADD_FAILURE() << "an unknown moe key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_router_jitter"), std::string::npos) << e.what();
  }
}

void expect_refused(const std::function<void()>& f, const std::string& named) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << named;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
}

TEST(MoeGptChunk, RefusesWhatItDoesNotDo) {
  GptConfig biased = tiny_moe();
  biased.disable_bias_linear = false;
  expect_refused([&] { biased.validate(); }, "--disable-bias-linear");
  GptConfig c = tiny_moe();
  expect_refused([&] { c.validate_tensor_parallel(2); }, "--tensor-model-parallel-size");
  expect_refused(
      [&] {
        GptChunk m(cpu(), c, ChunkSpec::whole_model(), DType::f32, {}, 1,
                   RecomputeConfig{
                       .granularity = RecomputeGranularity::full, .method = RecomputeMethod::uniform, .num_layers = 1});
      },
      "--recompute-granularity full with --num-experts");
  RecomputeConfig mlp{.granularity = RecomputeGranularity::selective};
  mlp.modules.mlp = true;
  expect_refused([&] { GptChunk m(cpu(), c, ChunkSpec::whole_model(), DType::f32, {}, 1, mlp); },
                 "--recompute-modules mlp");
}

// Aux-loss-free balancing: the bias moves once per optimizer step, from that step's counts.
TEST(MoeGptChunk, ExpertBiasUpdatesAtTheOptimizerStep) {
  GptConfig c = tiny_moe();
  c.moe.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe.moe_router_enable_expert_bias = true;
  c.moe.moe_router_bias_update_rate = 0.25f;
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(3);
  Optimizer opt(model, {.adam = {.lr = 1e-3f}, .clip_grad = 1.0f});
  const Inputs in = make_inputs(c, 4);
  ActivationsPtr a = model.forward(in.tokens, in.targets, Tensor(), {.training = true});
  model.backward(*a, Tensor(), Tensor());
  model.release(std::move(a));
  const MoeRouterState& s = model.moe_router_state_of(1);
  double counted = 0;
  for (int e = 0; e < 4; ++e) counted += s.tokens_per_expert.data_as<float>()[e];
  EXPECT_EQ(counted, double(in.tokens.numel() * 2)) << "every (token, choice) counted";
  for (int e = 0; e < 4; ++e) EXPECT_EQ(s.expert_bias.data_as<float>()[e], 0.0f) << "before the step";
  opt.step(1e-3f);
  double moved = 0;
  for (int e = 0; e < 4; ++e) moved += std::abs(s.expert_bias.data_as<float>()[e]);
  EXPECT_GT(moved, 0.0) << "the bias did not move at the step";
  for (int e = 0; e < 4; ++e) EXPECT_EQ(s.tokens_per_expert.data_as<float>()[e], 0.0f) << "counts reset";
}

}  // namespace
}  // namespace troupe::test
