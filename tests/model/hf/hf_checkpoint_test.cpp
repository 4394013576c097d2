// HF checkpoint folders: a save/load round trip (one file, shards, bf16 and f16), and clear
// errors naming the tensor or file for everything that is not exactly the config's model: a
// missing tensor, an extra one (fewer layers in the config than in the files), a wrong shape
// or dtype, a weight that is not finite, a truncated file, a bad shard index, an unknown
// config key, and weights that are not safetensors (pytorch_model.bin).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "kernels/half.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/hf/hf_tensor_files.hpp"
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

// Edits config.json of `dir` through `edit`.
void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  edit(j);
  std::ofstream(path) << j.dump(2);
}

// What loading `dir` as its config says throws ("" when it loads).
std::string load_error(const std::string& dir) {
  try {
    const HfCheckpoint ck = read_hf_checkpoint(dir);
    load_hf_weights(dir, ParamLayout(ck.config, ChunkSpec::whole_model()), ck.arch);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A config with fewer layers than the files used to drop the rest without a word.
TEST(HfCheckpoint, FewerLayersInTheConfigThanInTheFilesAreRefused) {
  for (const HfArch arch : {HfArch::gpt2, HfArch::llama}) {
    const TempDir tmp("hf");
    const std::string dir = tmp.path().string();
    ParamLayout layout(small(arch), ChunkSpec::whole_model());
    save_hf_checkpoint(dir, layout, arch, random_weights(layout));
    ASSERT_EQ(load_error(dir), "");
    const char* key = arch == HfArch::gpt2 ? "n_layer" : "num_hidden_layers";
    edit_config(dir, [&](nlohmann::json& j) { j[key] = 1; });
    const std::string why = load_error(dir);
    EXPECT_NE(why.find(arch == HfArch::gpt2 ? "'transformer.h.1." : "'model.layers.1."), std::string::npos) << why;
    EXPECT_NE(why.find("does not have"), std::string::npos) << why;
    edit_config(dir, [&](nlohmann::json& j) { j[key] = 1.9; });
    EXPECT_NE(load_error(dir).find(str_cat("'", key, "' must be a positive integer, got 1.9")), std::string::npos)
        << load_error(dir);
  }
}

TEST(HfCheckpoint, ExtraTensorsAreRefusedKnownBuffersAreNot) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout gpt2(small(HfArch::gpt2), ChunkSpec::whole_model());
  const Tensor w = random_weights(gpt2);
  auto save_with = [&](std::vector<std::pair<std::string, Tensor>> extra) {
    save_hf_checkpoint(dir, gpt2, HfArch::gpt2, w);
    rewrite(dir, [&](auto& t) { t.insert(t.end(), extra.begin(), extra.end()); });
  };
  // GPT-2's causal mask buffers, as older transformers saved them: not parameters, ignored.
  save_with({{"transformer.h.0.attn.bias", Tensor::host(DType::f32, {1, 1, 4, 4})},
             {"transformer.h.1.attn.masked_bias", Tensor::host(DType::f32, {})}});
  ASSERT_EQ(load_error(dir), "");
  EXPECT_EQ(max_abs_diff(load_hf_weights(dir, gpt2, HfArch::gpt2), w), 0.0);
  for (const char* extra : {"transformer.h.0.attn.c_attn.lora_A", "transformer.h.2.attn.bias", "lm_head.bias"}) {
    save_with({{extra, Tensor::host(DType::f32, {4})}});
    const std::string why = load_error(dir);
    EXPECT_NE(why.find(str_cat("'", extra, "'")), std::string::npos) << extra << ": " << why;
  }
  // Llama: RoPE frequencies older conversions saved are ignored; a bias the config has not is not.
  ParamLayout llama(small(HfArch::llama), ChunkSpec::whole_model());
  save_hf_checkpoint(dir, llama, HfArch::llama, random_weights(llama));
  rewrite(dir, [](auto& t) {
    t.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", Tensor::host(DType::f32, {8}));
  });
  ASSERT_EQ(load_error(dir), "");
  rewrite(dir, [&](auto& t) {
    t.emplace_back("model.layers.1.self_attn.o_proj.bias", Tensor::host(DType::f32, {llama.config().hidden_size}));
  });
  EXPECT_NE(load_error(dir).find("'model.layers.1.self_attn.o_proj.bias'"), std::string::npos) << load_error(dir);
}

TEST(HfCheckpoint, WeightsThatAreNotFiniteOrNotFloatsAreRefused) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::llama), ChunkSpec::whole_model());
  const std::string down = "model.layers.1.mlp.down_proj.weight";  // [C, F]
  const int64_t F = layout.config().ffn();
  const struct {
    std::string tensor;
    int64_t element;
    float value;
    std::string expected;
  } cases[] = {{down, 1 * F + 2, std::numeric_limits<float>::quiet_NaN(), "index [1, 2] is nan"},
               {"model.norm.weight", 3, std::numeric_limits<float>::infinity(), "index [3] is inf"},
               {"model.norm.weight", 0, -std::numeric_limits<float>::infinity(), "index [0] is -inf"}};
  for (const auto& c : cases) {
    save_hf_checkpoint(dir, layout, HfArch::llama, random_weights(layout));
    rewrite(dir, [&](auto& t) {
      for (auto& [name, tensor] : t)
        if (name == c.tensor) tensor.template data_as<float>()[c.element] = c.value;
    });
    const std::string why = load_error(dir);
    EXPECT_NE(why.find(str_cat("tensor '", c.tensor, "'")), std::string::npos) << why;
    EXPECT_NE(why.find(c.expected), std::string::npos) << why;
  }
  save_hf_checkpoint(dir, layout, HfArch::llama, random_weights(layout));
  rewrite(dir, [&](auto& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.norm.weight") tensor = Tensor::host(DType::i32, tensor.shape());
  });
  EXPECT_NE(load_error(dir).find("'model.norm.weight': dtype I32 is not a weight dtype"), std::string::npos)
      << load_error(dir);
}

// Qwen3-0.6B's file holds lm_head.weight although its config ties it to the embedding.
TEST(HfCheckpoint, ATiedConfigsOutputLayerInTheFileMustBeTheEmbedding) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  GptConfig c = small(HfArch::llama);
  c.untie_embeddings_and_output_weights = false;
  ParamLayout layout(c, ChunkSpec::whole_model());
  const Tensor w = random_weights(layout);
  for (const bool same : {true, false}) {
    save_hf_checkpoint(dir, layout, HfArch::llama, w);
    rewrite(dir, [&](auto& t) {
      Tensor head;
      for (auto& [name, tensor] : t)
        if (name == "model.embed_tokens.weight") head = SafetensorsFile::open(dir + "/model.safetensors").read(name);
      if (!same) head.data_as<float>()[5] += 1.0f;
      t.emplace_back("lm_head.weight", head);
    });
    const std::string why = load_error(dir);
    if (same) {
      EXPECT_EQ(why, "");
      EXPECT_EQ(max_abs_diff(load_hf_weights(dir, layout, HfArch::llama), w), 0.0);
    } else {
      EXPECT_NE(why.find("lm_head.weight"), std::string::npos) << why;
      EXPECT_NE(why.find("tie_word_embeddings"), std::string::npos) << why;
    }
  }
}

TEST(HfCheckpoint, ShardedFoldersRoundTripWithTheirIndex) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::llama), ChunkSpec::whole_model());
  const Tensor w = random_weights(layout);
  std::vector<std::string> written;
  save_hf_checkpoint(dir, layout, HfArch::llama, w,
                     {.max_shard_bytes = uint64_t(layout.size()) * 4 / 3,
                      .progress = [&](size_t done, size_t total, const std::string& name) {
                        EXPECT_EQ(done, written.size() + 1);
                        EXPECT_GE(total, done);
                        written.push_back(name);
                      }});
  const std::vector<std::string> files = tmp.files();
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors"), 0);
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors.index.json"), 1);
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(dir + "/model.safetensors.index.json"));
  std::set<std::string> shards;  // named as transformers names them
  for (const auto& [tensor, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GE(shards.size(), 3u);
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    EXPECT_EQ(shards.count(name), 1u) << name;
    EXPECT_EQ(std::count(files.begin(), files.end(), name), 1) << name;
  }
  EXPECT_EQ(index["weight_map"].size(), written.size());
  // Read back through the index, with a progress line per tensor.
  std::vector<std::string> read;
  const HfCheckpoint ck = read_hf_checkpoint(dir);
  EXPECT_EQ(max_abs_diff(load_hf_weights(dir, ParamLayout(ck.config, ChunkSpec::whole_model()), ck.arch,
                                         [&](size_t done, size_t total, const std::string& name) {
                                           EXPECT_EQ(total, written.size());
                                           EXPECT_EQ(done, read.size() + 1);
                                           read.push_back(name);
                                         }),
                         w),
            0.0);
  EXPECT_EQ(read.size(), written.size());
}

TEST(HfCheckpoint, ABadShardIndexIsRefused) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::llama), ChunkSpec::whole_model());
  const Tensor w = random_weights(layout);
  const std::string index_path = dir + "/model.safetensors.index.json";
  auto save = [&] { save_hf_checkpoint(dir, layout, HfArch::llama, w, {.max_shard_bytes = 100'000}); };
  auto edit_index = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(index_path));
    edit(j);
    std::ofstream(index_path) << j.dump(2);
  };
  save();
  ASSERT_EQ(load_error(dir), "");
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  const std::string norm_file = index["weight_map"]["model.norm.weight"];
  const std::string emb_file = index["weight_map"]["model.embed_tokens.weight"];
  ASSERT_NE(norm_file, emb_file);

  fs::remove(dir + "/" + norm_file);  // a shard the index names is missing
  EXPECT_NE(load_error(dir).find(norm_file + ", which does not exist"), std::string::npos) << load_error(dir);
  save();
  edit_index([&](nlohmann::json& j) { j["weight_map"]["model.norm.weight"] = emb_file; });  // the wrong file
  EXPECT_NE(load_error(dir).find("puts tensor 'model.norm.weight' in"), std::string::npos) << load_error(dir);
  EXPECT_NE(load_error(dir).find("which does not hold it"), std::string::npos) << load_error(dir);
  save();
  // A tensor of a shard the index names, which it does not list.
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : index["weight_map"].items()) by_file[file.get<std::string>()].push_back(tensor);
  const auto shared = std::find_if(by_file.begin(), by_file.end(), [](const auto& f) { return f.second.size() > 1; });
  ASSERT_NE(shared, by_file.end());
  const std::string unlisted = shared->second.front();
  edit_index([&](nlohmann::json& j) { j["weight_map"].erase(unlisted); });
  EXPECT_NE(load_error(dir).find(str_cat("holds tensor '", unlisted, "', which")), std::string::npos)
      << load_error(dir);
  EXPECT_NE(load_error(dir).find("does not list"), std::string::npos) << load_error(dir);
  save();
  edit_index([&](nlohmann::json& j) { j["weight_map"]["model.norm.weight"] = "../" + norm_file; });
  EXPECT_NE(load_error(dir).find("not the name of a file beside the index"), std::string::npos) << load_error(dir);
  save();
  edit_index([&](nlohmann::json& j) { j.erase("weight_map"); });
  EXPECT_NE(load_error(dir).find("weight_map"), std::string::npos) << load_error(dir);
  save();
  fs::copy_file(dir + "/" + emb_file, dir + "/model.safetensors");  // and a single file beside it
  EXPECT_NE(load_error(dir).find("holds both model.safetensors and model.safetensors.index.json"), std::string::npos)
      << load_error(dir);
}

TEST(HfCheckpoint, ExportAsBf16OrF16RoundsToNearestEven) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::llama), ChunkSpec::whole_model());
  Tensor w = random_weights(layout);
  // Ties: 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7 (odd): to even is 1; 1 + 3 * 2^-8
  // halfway between 1 + 2^-7 and 1 + 2^-6 (even): 1 + 2^-6. Truncation gives 1 and 1 + 2^-7.
  const int64_t norm = layout.find("decoder.final_layernorm.weight").offset;
  w.at(norm) = 1.0f + std::ldexp(1.0f, -8);
  w.at(norm + 1) = 1.0f + 3 * std::ldexp(1.0f, -8);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    save_hf_checkpoint(dir, layout, HfArch::llama, w, {.dtype = dtype});
    const SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
    for (const std::string& name : f.names()) EXPECT_EQ(f.info(name).dtype, dtype) << name;
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    EXPECT_EQ(config["torch_dtype"], dtype == DType::bf16 ? "bfloat16" : "float16");
    const HfCheckpoint ck = read_hf_checkpoint(dir);
    const Tensor back = load_hf_weights(dir, ParamLayout(ck.config, ChunkSpec::whole_model()), ck.arch);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float want = dtype == DType::bf16 ? round_to_bf16(w.at(i)) : f16_bits_to_f32(f32_to_f16_bits(w.at(i)));
      ASSERT_EQ(back.at(i), want) << dtype_name(dtype) << " element " << i << " of " << w.at(i);
    }
    if (dtype == DType::bf16) {
      EXPECT_EQ(back.at(norm), 1.0f);
      EXPECT_EQ(back.at(norm + 1), 1.0f + std::ldexp(1.0f, -6));
    }
  }
  save_hf_checkpoint(dir, layout, HfArch::llama, w);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir + "/config.json"))["torch_dtype"], "float32");
  // 70000 overflows f16 (largest 65504), not bf16; a NaN is refused whatever the dtype.
  w.at(norm + 2) = 70000.0f;
  expect_error_naming([&] { save_hf_checkpoint(dir, layout, HfArch::llama, w, {.dtype = DType::f16}); },
                      "cannot export tensor 'model.norm.weight' as f16: its element 2 = 70000 overflows it");
  save_hf_checkpoint(dir, layout, HfArch::llama, w, {.dtype = DType::bf16});
  w.at(norm + 2) = std::numeric_limits<float>::quiet_NaN();
  expect_error_naming([&] { save_hf_checkpoint(dir, layout, HfArch::llama, w); },
                      "cannot export tensor 'model.norm.weight': its element 2 is nan");
}

TEST(HfCheckpoint, WeightsThatAreNotSafetensorsAreRefusedSayingHowToConvert) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::gpt2), ChunkSpec::whole_model());
  save_hf_checkpoint(dir, layout, HfArch::gpt2, random_weights(layout));
  fs::rename(dir + "/model.safetensors", dir + "/pytorch_model.bin");
  for (const std::string& why : {load_error(dir), [&] {
                                   try {
                                     HfTensorFiles{dir};
                                   } catch (const Error& e) {
                                     return std::string(e.what());
                                   }
                                   return std::string();
                                 }()}) {
    EXPECT_NE(why.find("holds its weights as pytorch_model.bin"), std::string::npos) << why;
    EXPECT_NE(why.find("save_pretrained('OUT', safe_serialization=True)"), std::string::npos) << why;
  }
  fs::rename(dir + "/pytorch_model.bin", dir + "/pytorch_model-00001-of-00002.bin");
  std::ofstream(dir + "/pytorch_model-00002-of-00002.bin") << "x";
  std::ofstream(dir + "/pytorch_model.bin.index.json") << "{}";
  EXPECT_NE(load_error(dir).find("pytorch_model-00001-of-00002.bin, pytorch_model-00002-of-00002.bin, "
                                 "pytorch_model.bin.index.json"),
            std::string::npos)
      << load_error(dir);
  for (const char* f :
       {"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"})
    fs::remove(dir + "/" + f);
  EXPECT_NE(load_error(dir).find("no model.safetensors or model.safetensors.index.json in"), std::string::npos)
      << load_error(dir);
}

TEST(HfCheckpoint, AnUnknownConfigKeyIsRefusedNamingTheKeyAndTheFile) {
  const TempDir tmp("hf");
  const std::string dir = tmp.path().string();
  ParamLayout layout(small(HfArch::llama), ChunkSpec::whole_model());
  save_hf_checkpoint(dir, layout, HfArch::llama, random_weights(layout));
  edit_config(dir, [](nlohmann::json& j) { j["some_new_switch"] = 3; });
  const std::string why = load_error(dir);
  EXPECT_NE(why.find(dir + "/config.json"), std::string::npos) << why;
  EXPECT_NE(why.find("unknown key 'some_new_switch' = 3"), std::string::npos) << why;
}

}  // namespace
}  // namespace troupe::test
