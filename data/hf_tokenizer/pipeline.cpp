#include "data/hf_tokenizer/pipeline.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/hf_tokenizer/bpe_json.hpp"

namespace troupe::hf {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) TROUPE_FAIL("hf tokenizer: cannot open ", path.string(), ": ", std::strerror(errno));
  std::string data;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) data.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  TROUPE_CHECK(!failed, "hf tokenizer: cannot read ", path.string());
  return data;
}

nlohmann::json parse_json(std::string_view text, const std::string& name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    TROUPE_FAIL(name, ": malformed JSON: ", e.what());
  }
}

// A token named in tokenizer_config.json: a string, or transformers' {"content": ...} object.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key, const std::string& name) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  TROUPE_FAIL(name, ": ", key, " is neither a string nor {\"content\": ...}: ", it->dump());
}

int32_t id_of(const Pipeline& p, const std::string& token, const char* key, const std::string& name) {
  if (const auto id = p.added.id_of(token)) return *id;
  const int32_t id = p.model.token_id(token);
  TROUPE_CHECK(id >= 0, name, ": ", key, " \"", token, "\" is not a token of the tokenizer");
  return id;
}

// transformers rebuilds a Llama-style post-processor from add_bos_token/add_eos_token; where
// tokenizer.json's disagrees, HF's tokenizers and Megatron's HuggingFaceTokenizer would encode
// differently, so such files are refused.
void check_add_flags(const Pipeline& p, const nlohmann::json& config, const std::string& name) {
  auto flag = [&](const char* key) -> std::optional<bool> {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_boolean()) return std::nullopt;
    return it->get<bool>();
  };
  const std::vector<int32_t>& pre = p.post_processor.prefix();
  const std::vector<int32_t>& post = p.post_processor.suffix();
  if (const auto add_bos = flag("add_bos_token")) {
    const bool has = p.bos && !pre.empty() && pre.front() == *p.bos;
    TROUPE_CHECK(*add_bos == has, name, ": add_bos_token is ", *add_bos, " but tokenizer.json's post_processor ",
                 has ? "adds" : "does not add", " the bos_token; transformers would encode differently");
  }
  if (const auto add_eos = flag("add_eos_token")) {
    const bool has = !post.empty() && post.back() == p.eos;
    TROUPE_CHECK(*add_eos == has, name, ": add_eos_token is ", *add_eos, " but tokenizer.json's post_processor ",
                 has ? "adds" : "does not add", " the eos_token; transformers would encode differently");
  }
}

// Whether no token of a character-level model holds "▁" right after another character.
bool metaspace_is_a_boundary(const BpeModel& model) {
  constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581
  if (model.options().byte_level || model.options().ignore_merges || model.token_id(kMeta) < 0) return false;
  for (int32_t id = 0; id < model.vocab_size(); ++id) {
    if (!model.has_id(id)) continue;
    const std::string_view t = model.token_spelling(id);
    for (size_t at = t.find(kMeta, 1); at != std::string_view::npos; at = t.find(kMeta, at + 1))
      if (!t.substr(0, at).ends_with(kMeta)) return false;
  }
  return true;
}

}  // namespace

Pipeline parse_pipeline(std::string_view tokenizer_json, std::optional<std::string_view> config_json,
                        const std::string& json_name, const std::string& config_name) {
  const nlohmann::json j = parse_json(tokenizer_json, json_name);
  TROUPE_CHECK(j.is_object(), json_name, ": expected a JSON object");
  for (const auto& [key, value] : j.items()) {
    static const char* const kKnown[] = {"version",       "truncation",     "padding", "added_tokens", "normalizer",
                                         "pre_tokenizer", "post_processor", "decoder", "model"};
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    TROUPE_CHECK(known, json_name, ": the field \"", key, "\" is not implemented; it could change the tokens");
  }
  if (j.contains("version"))
    TROUPE_CHECK(j["version"] == "1.0", json_name, ": version ", j["version"].dump(), " is not 1.0");
  for (const char* key : {"truncation", "padding"})
    TROUPE_CHECK(!j.contains(key) || j[key].is_null(), json_name, ": ", key, " ", j[key].dump(),
                 " is not implemented (it changes the ids; it must be null)");
  TROUPE_CHECK(j.contains("model"), json_name, ": no \"model\"");
  const nlohmann::json null;
  auto field = [&](const char* key) -> const nlohmann::json& { return j.contains(key) ? j[key] : null; };

  Pipeline p;
  p.normalizer = Normalizer::parse(field("normalizer"), json_name);
  p.pre_tokenizer = PreTokenizer::parse(field("pre_tokenizer"), json_name);
  p.model = parse_bpe_model(j["model"], p.pre_tokenizer.byte_level(), json_name);
  p.added = AddedVocabulary::parse(field("added_tokens"), p.normalizer, p.model, json_name);
  p.post_processor = PostProcessor::parse(field("post_processor"), json_name);
  p.decoder = Decoder::parse(field("decoder"), json_name);
  p.vocab_size = std::max(p.model.vocab_size(), p.added.id_end());
  p.cut_before_metaspace = metaspace_is_a_boundary(p.model);
  for (const std::vector<int32_t>* ids : {&p.post_processor.prefix(), &p.post_processor.suffix()})
    for (const int32_t id : *ids)
      TROUPE_CHECK(id < p.vocab_size, json_name, ": post_processor: special token id ", id, " is past the vocabulary");

  // Megatron's HuggingFaceTokenizer: eod is the tokenizer's eos_token, bos its bos_token.
  TROUPE_CHECK(config_json.has_value(), config_name,
               " is missing: it names the end-of-document token (eos_token) that HuggingFaceTokenizer appends");
  const nlohmann::json config = parse_json(*config_json, config_name);
  TROUPE_CHECK(config.is_object(), config_name, ": expected a JSON object");
  const std::optional<std::string> eos = config_token(config, "eos_token", config_name);
  TROUPE_CHECK(eos.has_value(), config_name,
               ": no eos_token: the end-of-document token HuggingFaceTokenizer appends is missing");
  p.eos = id_of(p, *eos, "eos_token", config_name);
  if (const std::optional<std::string> bos = config_token(config, "bos_token", config_name))
    p.bos = id_of(p, *bos, "bos_token", config_name);
  check_add_flags(p, config, config_name);
  return p;
}

Pipeline load_pipeline(const std::string& path) {
  TROUPE_CHECK(!path.empty(), "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model");
  const fs::path p(path);
  const fs::path json = fs::is_directory(p) ? p / "tokenizer.json" : p;
  const fs::path config = json.parent_path() / "tokenizer_config.json";
  TROUPE_CHECK(fs::exists(json), "hf tokenizer: ", json.string(), " does not exist (--tokenizer-model is a folder ",
               "holding tokenizer.json, or that file)");
  const std::string json_text = read_file(json);
  std::optional<std::string> config_text;
  if (fs::exists(config)) config_text = read_file(config);
  return parse_pipeline(json_text, config_text ? std::optional<std::string_view>(*config_text) : std::nullopt,
                        json.string(), config.string());
}

}  // namespace troupe::hf
