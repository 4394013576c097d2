// The HF config reader on the mixtures of experts (MixtralForCausalLM, Qwen2MoeForCausalLM,
// Qwen3MoeForCausalLM) as transformers 5 writes them (tests/model/hf/configs/*-moe, mixtral):
// experts, top-k, router normalization, expert and shared-expert sizes and which layers are
// sparse read into Megatron's MoE flags; and each key of theirs that would change the math
// without being implemented refused with an error naming it.
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

TEST(HfMoeConfig, MixtralHasExpertsOnEveryLayerAndRenormalizesTheTopK) {
  const HfConfig hf = read_hf_config(hf_config_fixture("mixtral.transformers5.json"), "mixtral");
  const GptConfig& c = hf.model;
  EXPECT_EQ(hf.arch, HfArch::mixtral);
  EXPECT_EQ(hf.model_type, "mixtral");
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.moe_router_topk, 2);
  EXPECT_EQ(c.moe.moe_router_score_function, MoeScoreFunction::softmax);
  EXPECT_FALSE(c.moe.moe_router_pre_softmax);  // top k of the logits, softmax over the k
  EXPECT_EQ(c.moe.moe_router_topk_scaling_factor, 0.0f);
  EXPECT_EQ(c.moe.expert_ffn(c.ffn()), 512);  // Mixtral's intermediate_size is the experts'
  EXPECT_FALSE(c.moe.has_shared_expert());
  EXPECT_EQ(c.moe.load_balancing_coeff(), 0.0f);  // output_router_logits false: no aux loss in HF's loss
  for (int l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
  EXPECT_FALSE(c.qk_layernorm);
  EXPECT_FALSE(c.add_qkv_bias);
  EXPECT_EQ(c.head_dim(), 64);  // head_dim null: hidden / heads
  EXPECT_EQ(c.query_groups(), 2);
  EXPECT_FLOAT_EQ(c.rotary_base, 1e6f);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-5f);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.untie_embeddings_and_output_weights);
  c.validate();
}

TEST(HfMoeConfig, MixtralSlidingWindowIsMistrals) {
  json j = hf_config_fixture("mixtral.transformers5.json");
  j["sliding_window"] = 512;
  EXPECT_EQ(read_hf_config(j, "mixtral").model.sliding_window, 512);
  j["sliding_window"] = -1;
  EXPECT_NE(hf_config_refusal(j).find("'sliding_window' must be a positive integer"), std::string::npos)
      << hf_config_refusal(j);
}

TEST(HfMoeConfig, Qwen2MoeHasAGatedSharedExpertAndAQkvBias) {
  const HfConfig hf = read_hf_config(hf_config_fixture("qwen2-moe.transformers5.json"), "qwen2-moe");
  const GptConfig& c = hf.model;
  EXPECT_EQ(hf.arch, HfArch::qwen_moe);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.moe_router_topk, 2);
  EXPECT_TRUE(c.moe.moe_router_pre_softmax);  // norm_topk_prob false: the k keep their softmax over all
  EXPECT_EQ(c.moe.moe_ffn_hidden_size, 128);
  EXPECT_EQ(c.ffn(), 512);  // the dense layers' (none here)
  EXPECT_EQ(c.moe.moe_shared_expert_intermediate_size, 256);
  EXPECT_TRUE(c.moe.moe_shared_expert_gate);
  EXPECT_TRUE(c.add_qkv_bias);
  EXPECT_FALSE(c.qk_layernorm);
  EXPECT_EQ(c.sliding_window, 0);  // sliding_window 0 with use_sliding_window false: none
  for (int l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
  c.validate();
  json no_bias = hf_config_fixture("qwen2-moe.transformers5.json");  // transformers 5's switch for the q, k, v bias
  no_bias["qkv_bias"] = false;
  EXPECT_FALSE(read_hf_config(no_bias, "qwen2-moe").model.add_qkv_bias);
}

TEST(HfMoeConfig, Qwen3MoeHasQkNormAndNormTopKProbIsMegatronsDefaultRouter) {
  const HfConfig hf = read_hf_config(hf_config_fixture("qwen3-moe.transformers5.json"), "qwen3-moe");
  const GptConfig& c = hf.model;
  EXPECT_EQ(hf.arch, HfArch::qwen_moe);
  EXPECT_EQ(c.moe.num_experts, 8);             // transformers 5's num_local_experts
  EXPECT_FALSE(c.moe.moe_router_pre_softmax);  // norm_topk_prob true: renormalized, as Mixtral
  EXPECT_EQ(c.moe.moe_ffn_hidden_size, 128);
  EXPECT_FALSE(c.moe.has_shared_expert());
  EXPECT_TRUE(c.qk_layernorm);
  EXPECT_FALSE(c.add_qkv_bias);
  EXPECT_EQ(c.head_dim(), 64);
  c.validate();
  json v4 = hf_config_fixture("qwen3-moe.transformers5.json");  // transformers 4 names the experts num_experts
  v4.erase("num_local_experts");
  v4["num_experts"] = 8;
  v4["norm_topk_prob"] = false;
  const HfConfig hf4 = read_hf_config(v4, "qwen3-moe 4.x");
  EXPECT_EQ(hf4.model.moe.num_experts, 8);
  EXPECT_TRUE(hf4.model.moe.moe_router_pre_softmax);
  v4["num_local_experts"] = 4;
  EXPECT_NE(hf_config_refusal(v4).find("'num_experts' = 8 and 'num_local_experts' = 4 differ"), std::string::npos)
      << hf_config_refusal(v4);
}

// transformers 4 writes rope_theta at the top, and Qwen's sliding window keys with a window that
// does not take effect (use_sliding_window false): the same model.
TEST(HfMoeConfig, Transformers4LayoutReadsTheSame) {
  for (const char* name :
       {"mixtral.transformers5.json", "qwen2-moe.transformers5.json", "qwen3-moe.transformers5.json"}) {
    json v4 = hf_config_fixture(name);
    v4["rope_theta"] = v4.at("rope_parameters").at("rope_theta");
    v4.erase("rope_parameters");
    v4.erase("layer_types");
    if (v4.at("model_type") != "mixtral") {
      v4["sliding_window"] = 4096;
      v4["max_window_layers"] = 1;
    }
    const GptConfig a = read_hf_config(hf_config_fixture(name), name).model, b = read_hf_config(v4, name).model;
    EXPECT_EQ(to_json(a), to_json(b)) << name;
    EXPECT_TRUE(b.moe.enabled()) << name;
  }
}

// Qwen-MoE layer l is sparse when not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0.
TEST(HfMoeConfig, QwenSparseLayersAreMoeLayerFreq) {
  json j = hf_config_fixture("qwen3-moe.transformers5.json");
  j["num_hidden_layers"] = 6;
  const struct {
    int step;
    json mlp_only;
    std::vector<int> moe;  // per layer
  } cases[] = {{1, json::array(), {1, 1, 1, 1, 1, 1}},       {2, json::array(), {0, 1, 0, 1, 0, 1}},
               {3, json::array(), {0, 0, 1, 0, 0, 1}},       {1, json::array({0, 4}), {0, 1, 1, 1, 0, 1}},
               {2, json::array({1, 9}), {0, 0, 0, 1, 0, 1}},  // 9: past the last layer, matches none
               {7, json::array(), {0, 0, 0, 0, 0, 0}}};
  for (const auto& k : cases) {
    j["decoder_sparse_step"] = k.step;
    j["mlp_only_layers"] = k.mlp_only;
    const GptConfig c = read_hf_config(j, "qwen3-moe").model;
    for (int l = 0; l < 6; ++l)
      EXPECT_EQ(c.is_moe_layer(l), k.moe[size_t(l)] == 1) << "step " << k.step << " " << k.mlp_only << " layer " << l;
  }
  j["mlp_only_layers"] = json::array({"1"});
  EXPECT_NE(hf_config_refusal(j).find("'mlp_only_layers' must be a list of layer indices"), std::string::npos)
      << hf_config_refusal(j);
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 0;
  EXPECT_NE(hf_config_refusal(j).find("'decoder_sparse_step' must be a positive integer"), std::string::npos)
      << hf_config_refusal(j);
}

// A test per key the MoE families have whose other values Troupe does not implement.
TEST(HfMoeConfig, RouterJitterNoiseIsRefused) {
  json j = hf_config_fixture("mixtral.transformers5.json");
  j["router_jitter_noise"] = 0.1;
  EXPECT_NE(hf_config_refusal(j).find("'router_jitter_noise' = 0.1 is not supported"), std::string::npos)
      << hf_config_refusal(j);
}

TEST(HfMoeConfig, OutputRouterLogitsIsRefusedInEveryFamily) {
  for (const char* name :
       {"mixtral.transformers5.json", "qwen2-moe.transformers5.json", "qwen3-moe.transformers5.json"}) {
    json j = hf_config_fixture(name);
    j["router_aux_loss_coef"] = 0.02;  // changes nothing while output_router_logits is false
    EXPECT_EQ(hf_config_refusal(j), "") << name;
    j["output_router_logits"] = true;
    EXPECT_NE(hf_config_refusal(j).find("'output_router_logits' = true is not supported"), std::string::npos)
        << name << ": " << hf_config_refusal(j);
  }
}

TEST(HfMoeConfig, KeysTheFamilyDoesNotHaveAreRefused) {
  json mixtral = hf_config_fixture("mixtral.transformers5.json");
  mixtral["norm_topk_prob"] = true;  // Qwen's switch: Mixtral always renormalizes
  EXPECT_NE(hf_config_refusal(mixtral).find("unknown key 'norm_topk_prob'"), std::string::npos)
      << hf_config_refusal(mixtral);
  json qwen3 = hf_config_fixture("qwen3-moe.transformers5.json");
  qwen3["shared_expert_intermediate_size"] = 256;  // Qwen2-MoE's
  EXPECT_NE(hf_config_refusal(qwen3).find("unknown key 'shared_expert_intermediate_size'"), std::string::npos)
      << hf_config_refusal(qwen3);
  json qwen2 = hf_config_fixture("qwen2-moe.transformers5.json");
  qwen2["num_local_experts"] = 8;  // Qwen2-MoE's is num_experts
  EXPECT_NE(hf_config_refusal(qwen2).find("'num_local_experts' = 8 is not supported"), std::string::npos)
      << hf_config_refusal(qwen2);
}

TEST(HfMoeConfig, KeysWhoseDefaultsDifferMustBeNamed) {
  json qwen3 = hf_config_fixture("qwen3-moe.transformers5.json");
  qwen3.erase("head_dim");
  EXPECT_NE(hf_config_refusal(qwen3).find("'head_dim' is missing"), std::string::npos) << hf_config_refusal(qwen3);
  json mixtral = hf_config_fixture("mixtral.transformers5.json");
  mixtral.erase("num_key_value_heads");
  EXPECT_NE(hf_config_refusal(mixtral).find("'num_key_value_heads' is missing"), std::string::npos)
      << hf_config_refusal(mixtral);
  json qwen2 = hf_config_fixture("qwen2-moe.transformers5.json");
  qwen2.erase("shared_expert_intermediate_size");
  EXPECT_NE(hf_config_refusal(qwen2).find("'shared_expert_intermediate_size' is missing"), std::string::npos)
      << hf_config_refusal(qwen2);
}

// Sizes that make no MoE model, in the file's own words.
TEST(HfMoeConfig, BadSizesAreNamedByTheirKeys) {
  json mixtral = hf_config_fixture("mixtral.transformers5.json");
  mixtral["num_experts_per_tok"] = 9;
  EXPECT_NE(hf_config_refusal(mixtral).find("num_experts_per_tok 9 is larger than num_local_experts 8"),
            std::string::npos)
      << hf_config_refusal(mixtral);
  json qwen2 = hf_config_fixture("qwen2-moe.transformers5.json");
  qwen2["moe_intermediate_size"] = 100;
  EXPECT_NE(hf_config_refusal(qwen2).find("moe_intermediate_size must be a multiple of 8, got 100"), std::string::npos)
      << hf_config_refusal(qwen2);
  qwen2["moe_intermediate_size"] = 128;
  qwen2["num_experts"] = 1.5;
  EXPECT_NE(hf_config_refusal(qwen2).find("'num_experts' must be a positive integer, got 1.5"), std::string::npos)
      << hf_config_refusal(qwen2);
}

}  // namespace
}  // namespace troupe::test
