// Model config defaults, validation messages, parameter layout and HF name mapping.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "model/hf/hf_mapping.hpp"
#include "model/train/lr_schedule.hpp"
#include "model/param_layout.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(GptConfig, Gpt2SizesMatchTheReference) {
  const GptConfig c = GptConfig::gpt2_124m();
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  EXPECT_EQ(c.padded_vocab_size(2), 50432);  // multiple of 128 * TP
  // 124,475,904 with the padded vocabulary and tied embeddings (nanoGPT's count for vocab 50304).
  EXPECT_EQ(c.num_parameters(), 124475904);
  EXPECT_EQ(GptConfig::gpt2_350m().num_parameters(), 354871296);
}

TEST(GptConfig, ValidationNamesTheFlag) {
  GptConfig c;
  c.num_attention_heads = 5;
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-attention-heads"), std::string::npos) << e.what();
  }
  c = GptConfig::llama_style(2, 64, 4, 3, 128);
  EXPECT_THROW(c.validate(), Error);  // 4 heads are not divisible into 3 groups
  c = GptConfig::gpt2_124m();
  c.attention_dropout = 0.1f;
  EXPECT_THROW(c.validate(), Error);
}

TEST(GptConfig, JsonRoundTrip) {
  GptConfig c = GptConfig::llama_style(3, 64, 4, 2, 160);
  c.sliding_window = 4096;
  const GptConfig d = gpt_config_from_json(to_json(c));
  EXPECT_EQ(to_json(d), to_json(c));
  EXPECT_EQ(d.sliding_window, 4096);
  EXPECT_THROW(gpt_config_from_json(nlohmann::json{{"normalization", "BatchNorm"}}), Error);
  c.sliding_window = -1;
  EXPECT_THROW(c.validate(), Error);
}

TEST(GptConfig, RopeScalingRoundTripsAndUnknownKeysAreRefused) {
  GptConfig c = GptConfig::llama_style(2, 64, 4, 2, 128);
  c.rope_scaling = {true, 32.0f, 1.0f, 4.0f, 8192.0f};
  c.validate();
  const nlohmann::json j = to_json(c);
  const GptConfig d = gpt_config_from_json(j);
  EXPECT_TRUE(d.rope_scaling.llama3);
  EXPECT_FLOAT_EQ(d.rope_scaling.factor, 32.0f);
  EXPECT_EQ(to_json(d), j);
  EXPECT_TRUE(to_json(GptConfig::llama_style(2, 64, 4, 2, 128)).at("rope_scaling").is_null());
  // A key this version does not know may change the model: refused, named.
  nlohmann::json newer = j;
  newer["multi_latent_attention"] = true;
  try {
    gpt_config_from_json(newer);
    ADD_FAILURE() << "an unknown key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'multi_latent_attention'"), std::string::npos) << e.what();
  }
  c.rope_scaling.high_freq_factor = 0.5f;  // below low_freq_factor
  EXPECT_THROW(c.validate(), Error);
}

// Qwen3's shape: q/k norms, a head dimension apart from hidden / heads, grouped queries.
GptConfig qwen3_tiny() {
  GptConfig c = GptConfig::llama_style(2, 64, 4, 2, 128);
  c.kv_channels = 24;
  c.qk_layernorm = true;
  c.untie_embeddings_and_output_weights = false;
  c.vocab_size = 1000;
  return c;
}

TEST(GptConfig, QkLayernormRoundTripsCountsAndNeedsRmsNorm) {
  const GptConfig c = qwen3_tiny();
  c.validate();
  const nlohmann::json j = to_json(c);
  EXPECT_EQ(j.at("qk_layernorm"), true);
  EXPECT_TRUE(gpt_config_from_json(j).qk_layernorm);
  EXPECT_FALSE(gpt_config_from_json(to_json(GptConfig::llama_style(2, 64, 4, 2, 128))).qk_layernorm);
  GptConfig plain = c;
  plain.qk_layernorm = false;
  EXPECT_EQ(c.num_parameters() - plain.num_parameters(), 2 * 2 * 24);  // two weights [D] per layer
  GptConfig ln = GptConfig::gpt2_124m();
  ln.qk_layernorm = true;
  try {
    ln.validate();
    ADD_FAILURE() << "LayerNorm with --qk-layernorm was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--qk-layernorm"), std::string::npos) << e.what();
  }
}

TEST(ParamLayout, QkNormWeightsAreReplicatedOnesWithoutDecay) {
  const GptConfig c = qwen3_tiny();
  for (int tp : {1, 2}) {
    ParamLayout layout(c, ChunkSpec::whole_model(), {0, tp});
    int64_t total = 0;
    for (const ParamInfo& p : layout.params()) total += p.replicated() ? p.numel() : p.global_numel();
    EXPECT_EQ(total, c.num_parameters()) << "TP " << tp;
    for (const char* name :
         {"decoder.layers.1.self_attention.q_layernorm.weight", "decoder.layers.1.self_attention.k_layernorm.weight"}) {
      const ParamInfo& p = layout.find(name);
      EXPECT_EQ(p.shape, (Shape{24})) << name;
      EXPECT_TRUE(p.replicated()) << name;
      EXPECT_TRUE(p.partial_grad) << name;
      EXPECT_FALSE(p.norm) << name;  // not only under sequence parallelism
      EXPECT_FALSE(p.decay) << name;
      EXPECT_EQ(p.init, ParamInit::ones) << name;
    }
    const LayerTensors t = layout.layer(Tensor::host(DType::f32, {layout.size()}), 0);
    EXPECT_EQ(t.q_norm.shape(), (Shape{24}));
    EXPECT_EQ(t.k_norm.shape(), (Shape{24}));
  }
  EXPECT_FALSE(ParamLayout(GptConfig::llama_style(2, 64, 4, 2, 128), ChunkSpec::whole_model())
                   .has("decoder.layers.0.self_attention.q_layernorm.weight"));
}

TEST(ParamLayout, ReverseOrderAlignedAndComplete) {
  const GptConfig c = GptConfig::gpt2_124m();
  ParamLayout layout(c, ChunkSpec::whole_model());
  int64_t total = 0;
  for (const ParamInfo& p : layout.params()) {
    EXPECT_EQ(p.offset % 64, 0) << p.name;
    total += p.numel();
  }
  EXPECT_EQ(total, c.num_parameters());
  EXPECT_EQ(layout.params().front().name, "decoder.final_layernorm.weight");
  EXPECT_EQ(layout.params().back().name, "embedding.word_embeddings.weight");
  EXPECT_FALSE(layout.find("decoder.layers.0.mlp.linear_fc1.bias").decay);
  EXPECT_TRUE(layout.find("decoder.layers.0.mlp.linear_fc1.weight").decay);
  EXPECT_THROW(layout.find("decoder.layers.12.mlp.linear_fc1.weight"), Error);
}

TEST(ParamLayout, InitIsTheSameWhateverChunkHoldsTheParameter) {
  GptConfig c = GptConfig::preset("gpt2-tiny");
  ParamLayout whole(c, ChunkSpec::whole_model()), part(c, {2, 2, false, true});
  Tensor a = Tensor::host(DType::f32, {whole.size()}), b = Tensor::host(DType::f32, {part.size()});
  init_params(whole, 42, a);
  init_params(part, 42, b);
  const std::string name = "decoder.layers.3.mlp.linear_fc2.weight";
  EXPECT_EQ(max_abs_diff(whole.view(a, name), part.view(b, name)), 0.0);
  // Output projections are scaled by 1/sqrt(2L).
  const Tensor w = whole.view(a, name);
  double sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) sq += double(w.at(i)) * w.at(i);
  EXPECT_NEAR(std::sqrt(sq / double(w.numel())), 0.02 / std::sqrt(8.0), 0.002);
}

// Exports random weights of `c` and imports them back: the same weights. Returns the HF names.
std::vector<std::string> expect_export_import_identity(const GptConfig& c, HfArch arch) {
  ParamLayout layout(c, ChunkSpec::whole_model());
  Tensor w = random_normal({layout.size()}, 3);
  // Padded vocabulary rows do not exist in HF files: zero them so the round trip is exact.
  for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
    if (!layout.has(name)) continue;
    Tensor t = layout.view(w, name);
    for (int64_t i = c.vocab_size * c.hidden_size; i < t.numel(); ++i) t.at(i) = 0.0f;
  }
  auto hf = export_hf(layout, arch, w);
  std::map<std::string, Tensor> by_name(hf.begin(), hf.end());
  Tensor back = Tensor::host(DType::f32, {layout.size()});
  import_hf(
      layout, arch,
      [&](const std::string& n, const Shape& s) {
        EXPECT_TRUE(by_name.count(n)) << n;
        EXPECT_EQ(by_name.at(n).shape(), s) << n;
        return by_name.at(n);
      },
      back);
  for (const ParamInfo& p : layout.params())
    EXPECT_EQ(max_abs_diff(layout.view(back, p.name), layout.view(w, p.name)), 0.0) << p.name;
  std::vector<std::string> names;
  for (const auto& [name, t] : hf) names.push_back(name);
  return names;
}

class HfMapping : public ::testing::TestWithParam<HfArch> {};

TEST_P(HfMapping, ExportThenImportIsIdentity) {
  const HfArch arch = GetParam();
  GptConfig c = arch == HfArch::gpt2 ? GptConfig::preset("gpt2-tiny") : GptConfig::preset("llama-tiny");
  c.vocab_size = 1000;
  expect_export_import_identity(c, arch);
}

TEST(HfMapping, Qwen3QkNormsMapToQNormAndKNorm) {
  const GptConfig c = qwen3_tiny();
  const std::vector<std::string> names = expect_export_import_identity(c, HfArch::llama);
  for (const char* name : {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  const nlohmann::json j = hf_config_from_gpt(c, HfArch::llama);
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(j.at("head_dim"), 24);
  EXPECT_EQ(j.at("attention_bias"), false);
  EXPECT_EQ(j.at("tie_word_embeddings"), true);
  GptConfig biased = c;  // Qwen3's attention_bias also biases o_proj: no HF family has this
  biased.add_qkv_bias = true;
  EXPECT_THROW(hf_config_from_gpt(biased, HfArch::llama), Error);
}

TEST(HfMapping, Gpt2Conv1DWeightsAreTransposed) {
  GptConfig c = GptConfig::preset("gpt2-tiny");
  c.vocab_size = 1000;
  ParamLayout layout(c, ChunkSpec::whole_model());
  Tensor w = random_normal({layout.size()}, 4);
  auto hf = export_hf(layout, HfArch::gpt2, w);
  for (auto& [name, t] : hf) {
    if (name != "transformer.h.0.attn.c_attn.weight") continue;
    const Tensor ours = layout.view(w, "decoder.layers.0.self_attention.linear_qkv.weight");  // [3C, C]
    ASSERT_EQ(t.shape(), (Shape{c.hidden_size, 3 * c.hidden_size}));
    EXPECT_EQ(t.at(5 * 3 * c.hidden_size + 7), ours.at(7 * c.hidden_size + 5));  // hf[5][7] == ours[7][5]
    return;
  }
  FAIL() << "no c_attn weight exported";
}

INSTANTIATE_TEST_SUITE_P(Archs, HfMapping, ::testing::Values(HfArch::gpt2, HfArch::llama),
                         [](const auto& info) { return std::string(info.param == HfArch::gpt2 ? "Gpt2" : "Llama"); });

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s;
  s.lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_iters = 10;
  s.decay_iters = 110;
  s.style = LrDecayStyle::cosine;
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: min + (max - min) / 2
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  s.style = LrDecayStyle::linear;
  EXPECT_NEAR(s.at(35), 0.775, 1e-12);
  EXPECT_THROW(lr_decay_style_from_name("exponential"), Error);
}

}  // namespace
}  // namespace troupe::test
