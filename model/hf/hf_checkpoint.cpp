#include "model/hf/hf_checkpoint.hpp"

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "model/hf/hf_tensor_files.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

// Tensors of HF files that are not parameters, left out of the weights on purpose:
// - GPT-2's h.{i}.attn.bias and h.{i}.attn.masked_bias: the causal mask and its fill value,
//   which transformers before 4.x saved; transformers builds them itself (non-persistent
//   buffers, ignored when loading), so the saved ones change nothing.
// - Llama-family model.layers.{i}.self_attn.rotary_emb.inv_freq and model.rotary_emb.inv_freq:
//   the RoPE frequencies older conversions saved; transformers computes them from the config
//   (rope_theta, rope_scaling) and ignores the saved ones, as Troupe does.
// Only for layers the config has: a buffer of a layer past num_hidden_layers is an extra tensor.
bool is_non_parameter_buffer(HfArch arch, const std::string& name, const std::string& prefix, int num_layers) {
  static const std::regex gpt2(R"(^(transformer\.)?h\.([0-9]+)\.attn\.(bias|masked_bias)$)");
  static const std::regex llama(R"(^model\.layers\.([0-9]+)\.self_attn\.rotary_emb\.inv_freq$)");
  std::smatch m;
  if (arch == HfArch::gpt2)
    return std::regex_match(name, m, gpt2) && m[1].str() == prefix && std::stoll(m[2].str()) < num_layers;
  if (name == "model.rotary_emb.inv_freq") return true;
  return std::regex_match(name, m, llama) && std::stoll(m[1].str()) < num_layers;
}

// "'a', 'b', 'c' and 2 more".
std::string some_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += str_cat(i ? ", '" : "'", names[i], "'");
  if (names.size() > 3) out += str_cat(" and ", names.size() - 3, " more");
  return out;
}

// A tied config's file may hold lm_head.weight too (Qwen3-0.6B does): harmless when it is the
// embedding, bit for bit; otherwise which of the two a reader uses is up to the reader.
void check_tied_output_layer(const HfTensorFiles& files, const std::string& embedding, const Shape& shape) {
  const Tensor head = files.read("lm_head.weight", shape), emb = files.read(embedding, shape);
  const float* a = head.data_as<float>();
  const float* b = emb.data_as<float>();
  for (int64_t i = 0; i < head.numel(); ++i)
    TROUPE_CHECK(std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i]),
                 "config.json ties the output layer to the embedding ", "(tie_word_embeddings), but lm_head.weight in ",
                 files.file_of("lm_head.weight"), " differs from ", embedding, " at row ", i / shape[1], ", column ",
                 i % shape[1], "; set tie_word_embeddings to false if the output layer is its own");
}

// Fused when any layer's experts are stacked (transformers 5's gate_up_proj); then every MoE
// layer's must be, or the per-expert tensors they lack are reported missing.
HfExpertLayout hf_expert_layout_of(const HfTensorFiles& files) {
  static const std::regex fused(R"(^model\.layers\.[0-9]+\.mlp\.experts\.gate_up_proj$)");
  for (const std::string& name : files.names())
    if (std::regex_match(name, fused)) return HfExpertLayout::fused;
  return HfExpertLayout::per_expert;
}

}  // namespace

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  check_hf_weights_are_safetensors(dir);
  const fs::path path = fs::path(dir) / "config.json";
  const HfConfig hf = read_hf_config(read_hf_json(path.string()), path.string());
  HfCheckpoint ck;
  ck.arch = hf.arch;
  ck.config = hf.model;
  ck.eos_token_ids = hf.eos_token_ids;
  ck.config.validate();
  return ck;
}

Tensor load_hf_weights(const std::string& dir, const ParamLayout& layout, HfArch arch, const HfProgress& progress) {
  const GptConfig& c = layout.config();
  TROUPE_CHECK(layout.tensor_shard().size == 1 && layout.first_layer() == 0 && layout.num_layers() == c.num_layers &&
                   layout.spec().pre_process && layout.spec().post_process,
               "load_hf_weights needs the whole model's layout (every tensor of the files must be one of its "
               "parameters)");
  const HfTensorFiles files(dir);
  // GPT2LMHeadModel files prefix names with "transformer."; bare GPT2Model files do not.
  const std::string prefix = arch == HfArch::gpt2 && !files.has("transformer.wte.weight") ? "" : "transformer.";
  const HfExpertLayout experts = hf_expert_layout_of(files);

  // The files must hold exactly the model of the config: a tensor it does not have (a layer
  // past num_hidden_layers, a bias) would otherwise be dropped without a word.
  std::set<std::string> wanted;
  for (const ParamInfo& p : layout.params())
    for (const HfPiece& piece : hf_pieces(c, arch, p.name, prefix, experts)) wanted.insert(piece.hf_name);
  std::vector<std::string> missing, extra;
  for (const std::string& name : wanted)
    if (!files.has(name)) missing.push_back(name);
  TROUPE_CHECK(missing.empty(), "'", dir, "' lacks ", missing.size(), " tensor(s) of the model its config.json ",
               "describes: ", some_names(missing));
  const bool tied = !c.untie_embeddings_and_output_weights;
  const std::string embedding = hf_pieces(c, arch, kWordEmbeddingName, prefix).front().hf_name;
  for (const std::string& name : files.names())
    if (!wanted.count(name) && !is_non_parameter_buffer(arch, name, prefix, c.num_layers) &&
        !(tied && name == "lm_head.weight"))
      extra.push_back(name);
  TROUPE_CHECK(extra.empty(), "'", dir, "' holds ", extra.size(), " tensor(s) that the model its config.json ",
               "describes does not have (another num_hidden_layers, a bias, tie_word_embeddings?), e.g. ",
               some_names(extra), " (the first in ", files.file_of(extra.front()), ")",
               "; fix config.json or the files: Troupe will not drop weights without a word");
  if (tied && files.has("lm_head.weight")) check_tied_output_layer(files, embedding, {c.vocab_size, c.hidden_size});

  Tensor host = Tensor::host(DType::f32, {layout.size()});
  size_t done = 0;
  // The last tensor read: the experts of a fused layer are slices of one tensor, asked for in a row.
  std::string last_name;
  Tensor last;
  import_hf(
      layout, arch,
      [&](const std::string& name, const Shape& shape) {
        if (name == last_name) return last;
        last = files.read(name, shape);
        last_name = name;
        if (progress) progress(++done, wanted.size(), name);
        return last;
      },
      host, prefix, experts);
  return host;
}

}  // namespace troupe
