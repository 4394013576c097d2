// The HF config reader against config.json files as transformers 4.x and 5.x write them
// (tests/model/hf/configs/): every family's sizes, RoPE base and scaling, tying and token ids
// read exactly, whichever layout; and every key that would change the math without being
// implemented refused with an error naming the key and its value.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/hf/hf_config.hpp"
#include "tests/model/hf/hf_config_fixture.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kConfigs = fs::path(TROUPE_SOURCE_DIR) / "tests/model/hf/configs";

TEST(HfConfig, Llama31ReadsTheLlama3ScalingAndTheta) {
  const HfConfig hf = read_hf_config(hf_config_fixture("llama3.1-8b.transformers4.json"), "llama3.1");
  const GptConfig& c = hf.model;
  EXPECT_EQ(hf.arch, HfArch::llama);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.query_groups(), 8);
  EXPECT_EQ(c.ffn(), 14336);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_positions(), 131072);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-5f);
  EXPECT_FLOAT_EQ(c.rotary_base, 500000.0f);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.original_max_positions, 8192.0f);
  EXPECT_TRUE(c.untie_embeddings_and_output_weights);
  EXPECT_EQ(hf.bos_token_id, 128000);
  EXPECT_EQ(hf.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(hf.dtype, "bfloat16");
  c.validate();
}

TEST(HfConfig, Llama32TiedWithHeadDimAndAnEosList) {
  const HfConfig hf = read_hf_config(hf_config_fixture("llama3.2-1b-instruct.transformers4.json"), "llama3.2");
  EXPECT_FALSE(hf.model.untie_embeddings_and_output_weights);
  EXPECT_EQ(hf.model.head_dim(), 64);
  EXPECT_FLOAT_EQ(hf.model.rope_scaling.factor, 32.0f);
  EXPECT_EQ(hf.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(HfConfig, Llama2AndGpt2AsBefore) {
  const HfConfig llama2 = read_hf_config(hf_config_fixture("llama2-7b.transformers4.json"), "llama2");
  EXPECT_FLOAT_EQ(llama2.model.rotary_base, 10000.0f);
  EXPECT_FALSE(llama2.model.rope_scaling.llama3);
  EXPECT_EQ(llama2.model.query_groups(), 32);
  EXPECT_EQ(llama2.dtype, "float16");
  const HfConfig gpt2 = read_hf_config(hf_config_fixture("gpt2.transformers4.json"), "gpt2");
  EXPECT_EQ(gpt2.arch, HfArch::gpt2);
  EXPECT_EQ(gpt2.model.num_layers, 12);
  EXPECT_EQ(gpt2.model.max_positions(), 1024);
  EXPECT_FALSE(gpt2.model.untie_embeddings_and_output_weights);
}

TEST(HfConfig, MistralIsLlamaWithItsSlidingWindow) {
  const HfConfig v3 = read_hf_config(hf_config_fixture("mistral-7b-v0.3.transformers4.json"), "mistral");
  EXPECT_EQ(v3.arch, HfArch::llama);
  EXPECT_EQ(v3.model_type, "mistral");
  EXPECT_FLOAT_EQ(v3.model.rotary_base, 1e6f);
  EXPECT_EQ(v3.model.vocab_size, 32768);
  EXPECT_EQ(v3.model.sliding_window, 0);  // v0.3: sliding_window null
  const HfConfig v1 = read_hf_config(hf_config_fixture("mistral-7b-v0.1.transformers4.json"), "mistral");
  EXPECT_EQ(v1.model.sliding_window, 4096);
  json negative = hf_config_fixture("mistral-7b-v0.1.transformers4.json");
  negative["sliding_window"] = -1;
  EXPECT_NE(hf_config_refusal(negative).find("'sliding_window' must be a positive integer"), std::string::npos);
}

TEST(HfConfig, Qwen25IsLlamaWithAQkvBias) {
  const json j = hf_config_fixture("qwen2.5-0.5b.transformers4.json");
  const HfConfig hf = read_hf_config(j, "qwen2.5");
  EXPECT_EQ(hf.arch, HfArch::llama);
  EXPECT_TRUE(hf.model.add_qkv_bias);
  EXPECT_FALSE(hf.model.has_bias());
  EXPECT_EQ(hf.model.head_dim(), 64);
  EXPECT_FLOAT_EQ(hf.model.rotary_base, 1e6f);
  EXPECT_FALSE(hf.model.untie_embeddings_and_output_weights);
  hf.model.validate();
  json sliding = j;  // its window on, from layer 4 on: refused
  sliding["use_sliding_window"] = true;
  sliding["sliding_window"] = 4096;
  sliding["max_window_layers"] = 4;
  const std::string why = hf_config_refusal(sliding);
  EXPECT_NE(why.find("'use_sliding_window' = true"), std::string::npos) << why;
}

TEST(HfConfig, Qwen3IsLlamaWithQkNormAndItsOwnHeadDim) {
  const json j = hf_config_fixture("qwen3-0.6b.transformers4.json");
  const HfConfig hf = read_hf_config(j, "qwen3");
  const GptConfig& c = hf.model;
  EXPECT_EQ(hf.arch, HfArch::llama);
  EXPECT_EQ(hf.model_type, "qwen3");
  EXPECT_TRUE(c.qk_layernorm);
  EXPECT_FALSE(c.add_qkv_bias);
  EXPECT_FALSE(c.has_bias());
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.query_groups(), 8);
  EXPECT_EQ(c.head_dim(), 128);  // not hidden / heads = 64
  EXPECT_EQ(c.qkv_size(), (16 + 2 * 8) * 128);
  EXPECT_EQ(c.ffn(), 3072);
  EXPECT_EQ(c.max_positions(), 40960);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_FLOAT_EQ(c.rotary_base, 1e6f);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-6f);
  EXPECT_FALSE(c.untie_embeddings_and_output_weights);
  EXPECT_EQ(hf.bos_token_id, 151643);
  EXPECT_EQ(hf.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(hf.dtype, "bfloat16");
  c.validate();
  // 0.6B with the tied embedding counted once: the model's name.
  EXPECT_NEAR(double(c.num_parameters()) / 1e9, 0.6, 0.05);
}

// Keys a Qwen3 config may leave out take Qwen3Config's defaults, not Llama's.
TEST(HfConfig, Qwen3DefaultsAreQwen3Configs) {
  json j = hf_config_fixture("qwen3-0.6b.transformers4.json");
  for (const char* key : {"head_dim", "num_key_value_heads", "max_position_embeddings"}) j.erase(key);
  j["num_attention_heads"] = 32;  // the 0.6B's 16 heads would not split into the default 32 key/value heads
  const HfConfig hf = read_hf_config(j, "qwen3");
  EXPECT_EQ(hf.model.num_attention_heads, 32);
  EXPECT_EQ(hf.model.head_dim(), 128);
  EXPECT_EQ(hf.model.query_groups(), 32);
  EXPECT_EQ(hf.model.max_positions(), 32768);
}

TEST(HfConfig, Qwen3RefusesWhatItCannotRun) {
  const json base = hf_config_fixture("qwen3-0.6b.transformers4.json");
  json sliding = base;  // the window on from layer 4 on, shorter than the context
  sliding["use_sliding_window"] = true;
  sliding["sliding_window"] = 4096;
  sliding["max_window_layers"] = 4;
  EXPECT_NE(hf_config_refusal(sliding).find("'max_window_layers' = 4 of 28 layers is not supported"), std::string::npos)
      << hf_config_refusal(sliding);
  json everywhere = sliding;  // the window on every layer: read
  everywhere["max_window_layers"] = 0;
  EXPECT_EQ(hf_config_refusal(everywhere), "");
  EXPECT_EQ(read_hf_config(everywhere, "qwen3").model.sliding_window, 4096);
  json after_last = sliding;  // from a layer the model does not have: no effect
  after_last["max_window_layers"] = 28;
  EXPECT_EQ(hf_config_refusal(after_last), "");
  json types = base;  // 5.x's spelled-out layer kinds
  types["layer_types"] = json::array();
  for (int l = 0; l < 28; ++l) types["layer_types"].push_back(l < 20 ? "full_attention" : "sliding_attention");
  EXPECT_NE(hf_config_refusal(types).find("'layer_types'"), std::string::npos) << hf_config_refusal(types);
  json bias = base;  // Qwen3's attention_bias also puts a bias on o_proj
  bias["attention_bias"] = true;
  EXPECT_NE(hf_config_refusal(bias).find("'attention_bias' = true"), std::string::npos) << hf_config_refusal(bias);
  json other_head = base;
  other_head["architectures"] = json::array({"Qwen3ForSequenceClassification"});
  EXPECT_NE(hf_config_refusal(other_head).find("Qwen3ForSequenceClassification"), std::string::npos)
      << hf_config_refusal(other_head);
}

// The same model written in the 5.x layout: rope_parameters instead of rope_theta/rope_scaling.
TEST(HfConfig, Transformers5LayoutReadsTheSame) {
  json v5 = hf_config_fixture("llama3.1-8b.transformers4.json");
  json rope = v5.at("rope_scaling");
  rope["rope_theta"] = v5.at("rope_theta");
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5.erase("torch_dtype");
  v5["rope_parameters"] = rope;
  v5["dtype"] = "bfloat16";
  const HfConfig a = read_hf_config(hf_config_fixture("llama3.1-8b.transformers4.json"), "4.x");
  const HfConfig b = read_hf_config(v5, "5.x");
  EXPECT_EQ(to_json(a.model), to_json(b.model));
  EXPECT_EQ(b.dtype, "bfloat16");
  // The bug this reader exists for: theta only inside rope_parameters.
  EXPECT_FLOAT_EQ(b.model.rotary_base, 500000.0f);
}

// Written by the installed transformers 5 (scripts/dump_hf_configs.py), where present.
TEST(HfConfig, ConfigsWrittenByTransformers5) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".transformers5.json") == std::string::npos) continue;
    ++seen;
    const json j = hf_config_fixture(name);
    const std::string why = hf_config_refusal(j);
    if (name.rfind("llama-yarn", 0) == 0) {
      EXPECT_NE(why.find("rope_type \"yarn\""), std::string::npos) << name << ": " << why;
      continue;
    }
    if (name.rfind("qwen3-window", 0) == 0) {  // a window from layer 1 on: some layers only
      EXPECT_NE(why.find("'max_window_layers' = 1 of 2"), std::string::npos) << name << ": " << why;
      continue;
    }
    ASSERT_TRUE(why.empty()) << name << ": " << why;
    const HfConfig hf = read_hf_config(j, name);
    if (name.rfind("llama3", 0) == 0) {
      EXPECT_FLOAT_EQ(hf.model.rotary_base, 500000.0f) << name;
      EXPECT_TRUE(hf.model.rope_scaling.llama3) << name;
    }
    EXPECT_EQ(hf.model.sliding_window, name.rfind("mistral-window", 0) == 0 ? 512 : 0) << name;
    if (name.rfind("qwen3", 0) == 0 && name.rfind("qwen3-moe", 0) != 0) {  // MoE: hf_moe_config_test.cpp
      EXPECT_TRUE(hf.model.qk_layernorm) << name;
      EXPECT_EQ(hf.model.head_dim(), 128) << name;
      EXPECT_FLOAT_EQ(hf.model.rotary_base, 1e6f) << name;
      EXPECT_FALSE(hf.model.untie_embeddings_and_output_weights) << name;
      hf.model.validate();
    }
  }
  if (seen == 0) GTEST_SKIP() << "no transformers 5 fixtures";
}

TEST(HfConfig, KeysThatWouldChangeTheMathAreRefusedByName) {
  const json llama = hf_config_fixture("llama3.1-8b.transformers4.json");
  const json gpt2 = hf_config_fixture("gpt2.transformers4.json");
  struct Case {
    json base;
    std::string key;
    json value;
    std::string expected;  // in the error
  };
  const Case cases[] = {
      {llama, "hidden_act", "gelu", "'hidden_act' = \"gelu\""},
      {llama, "attention_bias", true, "'attention_bias' = true"},
      {llama, "mlp_bias", true, "'mlp_bias' = true"},
      {llama, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_type \"yarn\""},
      {llama, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, "rope_type \"linear\""},
      {llama, "rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}, "rope_type \"dynamic\""},
      {llama, "partial_rotary_factor", 0.5, "partial_rotary_factor = 0.5"},
      {llama, "num_hidden_layers", 1.9, "'num_hidden_layers' must be a positive integer, got 1.9"},
      {llama, "num_hidden_layers", "32", "'num_hidden_layers' must be a positive integer"},
      {llama, "model_type", "deepseek_v3", "model_type \"deepseek_v3\""},
      {llama, "model_type", "qwen3_moe", "architectures [\"LlamaForCausalLM\"] is not Qwen3MoeForCausalLM"},
      {llama, "model_type", "qwen3", "architectures [\"LlamaForCausalLM\"] is not Qwen3ForCausalLM"},
      {llama, "architectures", json::array({"LlamaForSequenceClassification"}), "LlamaForSequenceClassification"},
      {gpt2, "scale_attn_weights", false, "'scale_attn_weights' = false"},
      {gpt2, "scale_attn_by_inverse_layer_idx", true, "'scale_attn_by_inverse_layer_idx' = true"},
      {gpt2, "activation_function", "relu", "'activation_function' = \"relu\""},
      {gpt2, "n_layer", 1.9, "'n_layer' must be a positive integer, got 1.9"},
      {gpt2, "n_ctx", 512, "'n_ctx' = 512"},
      // Sizes that make no model, in the file's own words, not the Megatron flags behind them.
      {gpt2, "n_head", 5, "n_embd 768 is not divisible by n_head 5"},
      {llama, "num_key_value_heads", 5, "num_attention_heads 32 is not divisible by num_key_value_heads 5"},
  };
  for (const Case& c : cases) {
    json j = c.base;
    j[c.key] = c.value;
    const std::string why = hf_config_refusal(j);
    EXPECT_NE(why.find(c.expected), std::string::npos) << c.key << " = " << c.value.dump() << ": got \"" << why << "\"";
  }
  // 4.x and 5.x spellings of theta that disagree.
  json both = llama;
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  both.erase("rope_scaling");
  EXPECT_NE(hf_config_refusal(both).find("differ"), std::string::npos) << hf_config_refusal(both);
}

// Every key of every fixture (transformers 4 and 5, every family) is read, refused by name or
// known to change nothing: now that an unknown key is an error, none may be unknown.
TEST(HfConfig, EveryFixtureKeyIsKnown) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    const std::string why = hf_config_refusal(hf_config_fixture(entry.path().filename().string()));
    EXPECT_EQ(why.find("unknown key"), std::string::npos) << entry.path().filename() << ": " << why;
  }
  EXPECT_GE(seen, 17);
}

TEST(HfConfig, UnknownKeysAreRefusedNamingTheKeyAndTheFile) {
  json j = hf_config_fixture("llama2-7b.transformers4.json");
  j["use_cache"] = false;              // harmless
  j["gradient_checkpointing"] = true;  // harmless: a training memory setting
  j["quantization_config"] = nullptr;  // a feature we lack, not set
  j["final_logit_softcapping"] = nullptr;
  EXPECT_EQ(hf_config_refusal(j), "");
  json unknown = j;
  unknown["some_new_switch"] = true;
  try {
    read_hf_config(unknown, "ckpt/config.json");
    FAIL() << "an unknown key was accepted";
  } catch (const Error& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("ckpt/config.json"), std::string::npos) << why;
    EXPECT_NE(why.find("unknown key 'some_new_switch' = true"), std::string::npos) << why;
  }
  // Features we lack are refused by name once set; so is a key of another family's feature.
  const std::pair<const char*, json> set[] = {{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}},
                                              {"final_logit_softcapping", 30.0},
                                              {"attn_logit_softcapping", 50.0},
                                              {"num_local_experts", 8},
                                              {"sliding_window", 4096},  // Llama has no window
                                              {"use_sliding_window", true}};
  for (const auto& [key, value] : set) {
    json k = j;
    k[key] = value;
    EXPECT_NE(hf_config_refusal(k).find(str_cat("'", key, "' = ")), std::string::npos)
        << key << ": " << hf_config_refusal(k);
    EXPECT_NE(hf_config_refusal(k).find("is not supported"), std::string::npos) << key << ": " << hf_config_refusal(k);
  }
  // GPT-2 has no RoPE: rope settings in its config are unknown keys, not silently dropped.
  json gpt2 = hf_config_fixture("gpt2.transformers4.json");
  gpt2["rope_theta"] = 10000.0;
  EXPECT_NE(hf_config_refusal(gpt2).find("unknown key 'rope_theta'"), std::string::npos) << hf_config_refusal(gpt2);
  // layer_types for another number of layers, or in a Llama config, is checked too.
  json types = hf_config_fixture("llama2-7b.transformers4.json");
  types["layer_types"] = json::array({"full_attention"});
  EXPECT_NE(hf_config_refusal(types).find("'layer_types'"), std::string::npos) << hf_config_refusal(types);
  types["layer_types"] = json::array();
  for (int l = 0; l < 32; ++l) types["layer_types"].push_back("full_attention");
  EXPECT_EQ(hf_config_refusal(types), "");
}

}  // namespace
}  // namespace troupe::test
