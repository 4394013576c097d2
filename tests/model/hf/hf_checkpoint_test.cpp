// HF checkpoint folders: a save/load round trip, and clear errors naming the tensor for a
// missing tensor, a wrong shape and a truncated file.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "model/hf/hf_checkpoint.hpp"
#include "storage/safetensors.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

GptConfig small(HfArch arch) {
  GptConfig c = arch == HfArch::gpt2 ? GptConfig::preset("gpt2-tiny") : GptConfig::preset("llama-tiny");
  c.num_layers = 2;
  c.vocab_size = 300;
  return c;
}

Tensor random_weights(const ParamLayout& layout) {
  Tensor w = random_normal({layout.size()}, 7);
  for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
    if (!layout.has(name)) continue;
    Tensor t = layout.view(w, name);  // padded vocabulary rows are not in HF files
    for (int64_t i = layout.config().vocab_size * layout.config().hidden_size; i < t.numel(); ++i) t.at(i) = 0.0f;
  }
  for (const ParamInfo& p : layout.params()) {  // the padding between parameters is not either
    const int64_t end = p.offset + p.numel();
    const int64_t next = &p == &layout.params().back() ? layout.size() : (&p + 1)->offset;
    for (int64_t i = end; i < next; ++i) w.at(i) = 0.0f;
  }
  return w;
}

class HfCheckpointRoundTrip : public ::testing::TestWithParam<HfArch> {};

TEST_P(HfCheckpointRoundTrip, SaveThenLoadGivesTheSameWeightsAndConfig) {
  const HfArch arch = GetParam();
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(arch), ChunkSpec::whole_model());
  const Tensor w = random_weights(layout);
  save_hf_checkpoint(dir, layout, arch, w);
  const HfCheckpoint ck = read_hf_checkpoint(dir);
  EXPECT_EQ(ck.arch, arch);
  EXPECT_EQ(ck.config.num_layers, layout.config().num_layers);
  EXPECT_EQ(ck.config.query_groups(), layout.config().query_groups());
  EXPECT_EQ(ck.config.swiglu, layout.config().swiglu);
  ParamLayout loaded_layout(ck.config, ChunkSpec::whole_model());
  ASSERT_EQ(loaded_layout.size(), layout.size());
  EXPECT_EQ(max_abs_diff(load_hf_weights(dir, loaded_layout, arch), w), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Archs, HfCheckpointRoundTrip, ::testing::Values(HfArch::gpt2, HfArch::llama),
                         [](const auto& info) { return std::string(info.param == HfArch::gpt2 ? "Gpt2" : "Llama"); });

// Qwen3 (q/k norms, head_dim 24 apart from hidden / heads = 32, tied): written as a Qwen3 folder,
// read back as the same model and weights.
TEST(HfCheckpoint, Qwen3RoundTrip) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  GptConfig c = small(HfArch::llama);
  c.kv_channels = 24;
  c.qk_layernorm = true;
  c.untie_embeddings_and_output_weights = false;
  c.rotary_base = 1e6f;
  c.norm_epsilon = 1e-6f;
  ParamLayout layout(c, ChunkSpec::whole_model());
  const Tensor w = random_weights(layout);
  save_hf_checkpoint(dir, layout, HfArch::llama, w);
  const HfCheckpoint ck = read_hf_checkpoint(dir);
  EXPECT_EQ(ck.arch, HfArch::llama);
  EXPECT_TRUE(ck.config.qk_layernorm);
  EXPECT_EQ(ck.config.head_dim(), 24);
  EXPECT_FALSE(ck.config.untie_embeddings_and_output_weights);
  ParamLayout loaded_layout(ck.config, ChunkSpec::whole_model());
  ASSERT_EQ(loaded_layout.size(), layout.size());
  EXPECT_EQ(max_abs_diff(load_hf_weights(dir, loaded_layout, HfArch::llama), w), 0.0);
  const SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
  const std::vector<std::string> names = f.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.self_attn.q_norm.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.self_attn.k_norm.weight"), names.end());
}

// Rewrites model.safetensors of `dir` through `edit` (which may drop or replace tensors).
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

void expect_error_naming(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    FAIL() << "expected an error naming " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(HfCheckpoint, BadFilesAreRejectedNamingTheTensor) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::gpt2), ChunkSpec::whole_model());
  save_hf_checkpoint(dir, layout, HfArch::gpt2, random_weights(layout));
  const std::string victim = "transformer.h.1.mlp.c_fc.weight";

  rewrite(dir, [&](auto& t) { std::erase_if(t, [&](const auto& p) { return p.first == victim; }); });
  expect_error_naming([&] { load_hf_weights(dir, layout, HfArch::gpt2); }, victim);

  save_hf_checkpoint(dir, layout, HfArch::gpt2, random_weights(layout));
  rewrite(dir, [&](auto& t) {
    for (auto& p : t)
      if (p.first == victim) p.second = Tensor::host(DType::f32, {3, 5});
  });
  expect_error_naming([&] { load_hf_weights(dir, layout, HfArch::gpt2); }, victim);

  save_hf_checkpoint(dir, layout, HfArch::gpt2, random_weights(layout));
  const std::string path = dir + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  expect_error_naming([&] { load_hf_weights(dir, layout, HfArch::gpt2); }, "model.safetensors");

  std::ofstream(dir + "/config.json") << R"({"model_type": "bert"})";
  expect_error_naming([&] { read_hf_checkpoint(dir); }, "bert");
}

}  // namespace
}  // namespace troupe::test
