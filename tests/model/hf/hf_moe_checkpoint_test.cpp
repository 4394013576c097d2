// HF checkpoint folders of mixtures of experts: a small random Mixtral, Qwen2-MoE (gated shared
// expert, a dense layer) and Qwen3-MoE exported and imported back bit for bit with the same MoE
// config; the per-expert tensor names save_pretrained writes; transformers 5's fused in-memory
// layout (experts stacked in gate_up_proj / down_proj) imported to the same weights; and an MoE
// model no HF family holds refused on export, naming the flag.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "model/hf/hf_checkpoint.hpp"
#include "storage/safetensors.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

GptConfig tiny_moe() {
  GptConfig c = GptConfig::preset("llama-tiny");  // hidden 128, 4 heads, 2 groups
  c.num_layers = 2;
  c.vocab_size = 300;
  c.moe.num_experts = 4;
  c.moe.moe_router_topk = 2;
  c.moe.moe_ffn_hidden_size = 32;
  return c;
}

GptConfig mixtral() {
  GptConfig c = tiny_moe();
  c.ffn_hidden_size = 32;  // Mixtral has one intermediate_size: the experts'
  c.moe.moe_ffn_hidden_size = 0;
  return c;
}

GptConfig qwen2_moe() {  // a q/k/v bias, a gated shared expert, layer 0 dense, no renormalization
  GptConfig c = tiny_moe();
  c.add_qkv_bias = true;
  c.moe.moe_shared_expert_intermediate_size = 48;
  c.moe.moe_shared_expert_gate = true;
  c.moe.moe_router_pre_softmax = true;
  c.moe.moe_layer_freq = parse_moe_layer_freq("[0,1]");
  return c;
}

GptConfig qwen3_moe() {
  GptConfig c = tiny_moe();
  c.qk_layernorm = true;
  c.kv_channels = 24;
  return c;
}

// Random weights, zero where HF files hold nothing (padded vocabulary rows, alignment padding).
Tensor random_weights(const ParamLayout& layout) {
  Tensor w = random_normal({layout.size()}, 11);
  for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
    if (!layout.has(name)) continue;
    Tensor t = layout.view(w, name);
    for (int64_t i = layout.config().vocab_size * layout.config().hidden_size; i < t.numel(); ++i) t.at(i) = 0.0f;
  }
  for (const ParamInfo& p : layout.params()) {
    const int64_t end = p.offset + p.numel();
    const int64_t next = &p == &layout.params().back() ? layout.size() : (&p + 1)->offset;
    for (int64_t i = end; i < next; ++i) w.at(i) = 0.0f;
  }
  return w;
}

std::set<std::string> tensor_names(const std::string& dir) {
  const std::vector<std::string> names = SafetensorsFile::open(dir + "/model.safetensors").names();
  return {names.begin(), names.end()};
}

// Rewrites model.safetensors of `dir` through `edit`.
void rewrite(const std::string& dir, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& n : f.names()) tensors.emplace_back(n, f.read(n));
  }
  edit(tensors);
  write_safetensors(path, tensors);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Family {
  const char* name;
  GptConfig config;
  HfArch arch;
  const char* model_type;
  std::vector<std::string> expected_tensors;  // a few of the per-expert names save_pretrained writes
};

std::vector<Family> families() {
  return {
      {"Mixtral",
       mixtral(),
       HfArch::mixtral,
       "mixtral",
       {"model.layers.1.block_sparse_moe.gate.weight", "model.layers.1.block_sparse_moe.experts.3.w1.weight",
        "model.layers.0.block_sparse_moe.experts.0.w2.weight", "model.layers.0.block_sparse_moe.experts.2.w3.weight"}},
      {"Qwen2Moe",
       qwen2_moe(),
       HfArch::qwen_moe,
       "qwen2_moe",
       {"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.weight",
        "model.layers.1.mlp.experts.3.up_proj.weight", "model.layers.1.mlp.shared_expert.down_proj.weight",
        "model.layers.1.mlp.shared_expert_gate.weight", "model.layers.1.self_attn.k_proj.bias"}},
      {"Qwen3Moe",
       qwen3_moe(),
       HfArch::qwen_moe,
       "qwen3_moe",
       {"model.layers.0.mlp.experts.1.gate_proj.weight", "model.layers.0.mlp.experts.1.down_proj.weight",
        "model.layers.1.self_attn.q_norm.weight"}}};
}

TEST(HfMoeCheckpoint, ExportThenImportIsBitForBitWithTheSameMoeConfig) {
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    const TempDir tmp("hf-moe");
    const std::string dir = tmp.path().string();
    ParamLayout layout(f.config, ChunkSpec::whole_model());
    const Tensor w = random_weights(layout);
    EXPECT_EQ(hf_arch_for(f.config), f.arch);
    save_hf_checkpoint(dir, layout, hf_arch_for(f.config), w);
    const HfCheckpoint ck = read_hf_checkpoint(dir);
    EXPECT_EQ(ck.arch, f.arch);
    const MoeConfig &a = ck.config.moe, &b = f.config.moe;
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.moe_router_topk, b.moe_router_topk);
    EXPECT_EQ(a.moe_router_pre_softmax, b.moe_router_pre_softmax);
    EXPECT_EQ(a.expert_ffn(ck.config.ffn()), b.expert_ffn(f.config.ffn()));
    EXPECT_EQ(a.moe_shared_expert_intermediate_size, b.moe_shared_expert_intermediate_size);
    EXPECT_EQ(a.moe_shared_expert_gate, b.moe_shared_expert_gate);
    for (int l = 0; l < f.config.num_layers; ++l) EXPECT_EQ(ck.config.is_moe_layer(l), f.config.is_moe_layer(l)) << l;
    EXPECT_EQ(ck.config.add_qkv_bias, f.config.add_qkv_bias);
    EXPECT_EQ(ck.config.qk_layernorm, f.config.qk_layernorm);
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    EXPECT_EQ(j.at("model_type"), f.model_type);
    const std::set<std::string> names = tensor_names(dir);
    for (const std::string& name : f.expected_tensors) EXPECT_TRUE(names.count(name)) << name;
    ParamLayout loaded(ck.config, ChunkSpec::whole_model());
    ASSERT_EQ(loaded.size(), layout.size());
    EXPECT_EQ(max_abs_diff(load_hf_weights(dir, loaded, ck.arch), w), 0.0);
  }
}

// transformers 5 holds a layer's experts stacked: gate_up_proj [E, 2F, C] (rows [gate | up]) and
// down_proj [E, C, F], and Mixtral's router as mlp.gate; files saved from its state_dict keep that.
void fuse_experts(const GptConfig& c, HfArch arch, std::vector<std::pair<std::string, Tensor>>& tensors) {
  const int64_t E = c.moe.num_experts, F = c.moe.expert_ffn(c.ffn()), C = c.hidden_size;
  const bool mixtral = arch == HfArch::mixtral;
  auto take = [&](const std::string& name) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
    EXPECT_NE(it, tensors.end()) << name;
    Tensor t = it->second;
    tensors.erase(it);
    return t;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    const std::string block = "model.layers." + std::to_string(l) + (mixtral ? ".block_sparse_moe." : ".mlp.");
    const std::string fused = "model.layers." + std::to_string(l) + ".mlp.";
    Tensor gate_up = Tensor::host(DType::f32, {E, 2 * F, C}), down = Tensor::host(DType::f32, {E, C, F});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = block + "experts." + std::to_string(e) + ".";
      const Tensor g = take(x + (mixtral ? "w1.weight" : "gate_proj.weight"));
      const Tensor u = take(x + (mixtral ? "w3.weight" : "up_proj.weight"));
      const Tensor d = take(x + (mixtral ? "w2.weight" : "down_proj.weight"));
      float* gu = gate_up.data_as<float>() + e * 2 * F * C;
      std::copy_n(g.data_as<float>(), F * C, gu);
      std::copy_n(u.data_as<float>(), F * C, gu + F * C);
      std::copy_n(d.data_as<float>(), C * F, down.data_as<float>() + e * C * F);
    }
    const Tensor router = take(block + "gate.weight");
    tensors.emplace_back(fused + "gate.weight", router);
    tensors.emplace_back(fused + "experts.gate_up_proj", gate_up);
    tensors.emplace_back(fused + "experts.down_proj", down);
  }
}

TEST(HfMoeCheckpoint, TheFusedLayoutImportsAsThePerExpertOne) {
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    const TempDir tmp("hf-moe");
    const std::string dir = tmp.path().string();
    ParamLayout layout(f.config, ChunkSpec::whole_model());
    const Tensor w = random_weights(layout);
    save_hf_checkpoint(dir, layout, f.arch, w);
    rewrite(dir, [&](auto& t) { fuse_experts(f.config, f.arch, t); });
    const std::set<std::string> names = tensor_names(dir);
    ASSERT_TRUE(names.count("model.layers.1.mlp.experts.gate_up_proj"));
    ASSERT_FALSE(names.count("model.layers.1.mlp.experts.0.gate_proj.weight"));
    const HfCheckpoint ck = read_hf_checkpoint(dir);
    EXPECT_EQ(max_abs_diff(load_hf_weights(dir, ParamLayout(ck.config, ChunkSpec::whole_model()), ck.arch), w), 0.0);
  }
}

TEST(HfMoeCheckpoint, AMissingOrMisshapenExpertIsNamed) {
  const TempDir tmp("hf-moe");
  const std::string dir = tmp.path().string();
  ParamLayout layout(qwen3_moe(), ChunkSpec::whole_model());
  const std::string victim = "model.layers.1.mlp.experts.2.up_proj.weight";
  save_hf_checkpoint(dir, layout, HfArch::qwen_moe, random_weights(layout));
  rewrite(dir, [&](auto& t) { std::erase_if(t, [&](const auto& p) { return p.first == victim; }); });
  EXPECT_NE(error_of([&] { load_hf_weights(dir, layout, HfArch::qwen_moe); }).find(victim), std::string::npos);
  // An expert past num_experts is a tensor the config's model does not have.
  save_hf_checkpoint(dir, layout, HfArch::qwen_moe, random_weights(layout));
  const std::string extra = "model.layers.1.mlp.experts.4.up_proj.weight";
  rewrite(dir, [&](auto& t) { t.emplace_back(extra, Tensor::host(DType::f32, {32, 128})); });
  EXPECT_NE(error_of([&] { load_hf_weights(dir, layout, HfArch::qwen_moe); }).find(extra), std::string::npos);
  // A fused tensor of the wrong shape.
  save_hf_checkpoint(dir, layout, HfArch::qwen_moe, random_weights(layout));
  rewrite(dir, [&](auto& t) {
    fuse_experts(layout.config(), HfArch::qwen_moe, t);
    for (auto& [name, tensor] : t)
      if (name == "model.layers.0.mlp.experts.down_proj") tensor = Tensor::host(DType::f32, {4, 128, 16});
  });
  EXPECT_NE(
      error_of([&] { load_hf_weights(dir, layout, HfArch::qwen_moe); }).find("model.layers.0.mlp.experts.down_proj"),
      std::string::npos);
}

// Models no MoE family of transformers holds: refused on export, naming the flag.
TEST(HfMoeCheckpoint, ExportRefusesWhatNoFamilyHolds) {
  const struct {
    const char* what;
    std::function<void(GptConfig&)> edit;
    std::string expected;
  } cases[] = {
      {"sigmoid", [](GptConfig& c) { c.moe.moe_router_score_function = MoeScoreFunction::sigmoid; },
       "--moe-router-score-function sigmoid"},
      {"scaling", [](GptConfig& c) { c.moe.moe_router_topk_scaling_factor = 2.5f; },
       "--moe-router-topk-scaling-factor 2.5"},
      {"mixtral pre-softmax", [](GptConfig& c) { c.moe.moe_router_pre_softmax = true; }, "--moe-router-pre-softmax"},
      {"mixtral dense layer", [](GptConfig& c) { c.moe.moe_layer_freq = parse_moe_layer_freq("[1,0]"); },
       "--moe-layer-freq [1,0]"},
      {"shared expert without gate or bias", [](GptConfig& c) { c.moe.moe_shared_expert_intermediate_size = 48; },
       "Qwen2MoeForCausalLM (--add-qkv-bias"},
      {"qwen window",
       [](GptConfig& c) {
         c.qk_layernorm = true;
         c.sliding_window = 64;
       },
       "--sliding-window 64"},
  };
  for (const auto& k : cases) {
    GptConfig c = mixtral();
    k.edit(c);
    const TempDir tmp("hf-moe");
    const ParamLayout layout(c, ChunkSpec::whole_model());
    const std::string why =
        error_of([&] { save_hf_checkpoint(tmp.path().string(), layout, hf_arch_for(c), random_weights(layout)); });
    EXPECT_NE(why.find(k.expected), std::string::npos) << k.what << ": " << why;
    EXPECT_FALSE(fs::exists(tmp.path() / "config.json")) << k.what;
  }
}

}  // namespace
}  // namespace troupe::test
