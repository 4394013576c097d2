#include "apps/common/tokenizer_flags.hpp"

#include <filesystem>

#include "base/check.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

void add_tokenizer_flags(CLI::App* cmd, TokenizerOptions& o) {
  cmd->add_option("--tokenizer-type", o.type, "GPT2BPETokenizer, HuggingFaceTokenizer or NullTokenizer")
      ->check(CLI::IsMember({"GPT2BPETokenizer", "HuggingFaceTokenizer", "NullTokenizer"}))
      ->capture_default_str();
  cmd->add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json (GPT2BPETokenizer)");
  cmd->add_option("--merge-file", o.merge_file, "GPT-2 merges.txt (GPT2BPETokenizer)");
  cmd->add_option("--tokenizer-model", o.tokenizer_model,
                  "a folder with tokenizer.json (and tokenizer_config.json), or the tokenizer.json file "
                  "(HuggingFaceTokenizer)");
  cmd->add_option("--vocab-size", o.vocab_size, "ids before the EOD (NullTokenizer, mock data)");
}

bool tokenizer_flags_given(const TokenizerOptions& o) {
  return !o.vocab_file.empty() || !o.merge_file.empty() || !o.tokenizer_model.empty() || o.vocab_size > 0 ||
         o.type != TokenizerOptions{}.type;
}

std::string hf_tokenizer_dir(const TokenizerOptions& o) {
  const fs::path p(o.tokenizer_model);
  return fs::is_directory(p) ? p.string() : p.parent_path().string();
}

std::vector<std::pair<std::string, std::string>> tokenizer_source_files(const TokenizerOptions& o) {
  std::vector<std::pair<std::string, std::string>> out;
  if (o.type == "GPT2BPETokenizer") {
    if (!o.vocab_file.empty()) out.emplace_back(o.vocab_file, "vocab.json");
    if (!o.merge_file.empty()) out.emplace_back(o.merge_file, "merges.txt");
  } else if (o.type == "HuggingFaceTokenizer" && !o.tokenizer_model.empty()) {
    const fs::path dir = hf_tokenizer_dir(o);
    const fs::path json = fs::is_directory(o.tokenizer_model) ? dir / "tokenizer.json" : fs::path(o.tokenizer_model);
    out.emplace_back(json.string(), "tokenizer.json");
    for (const char* name : {"tokenizer_config.json", "generation_config.json"})
      if (fs::exists(dir / name)) out.emplace_back((dir / name).string(), name);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> tokenizer_files_in(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* name :
       {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "vocab.json", "merges.txt"})
    if (fs::exists(fs::path(dir) / name)) out.emplace_back((fs::path(dir) / name).string(), name);
  return out;
}

std::optional<TokenizerOptions> tokenizer_in(const std::string& dir) {
  TokenizerOptions t;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) {
    t.type = "HuggingFaceTokenizer";
    t.tokenizer_model = dir;
    return t;
  }
  const fs::path vocab = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  if (fs::exists(vocab) && fs::exists(merges)) {
    t.type = "GPT2BPETokenizer";
    t.vocab_file = vocab.string();
    t.merge_file = merges.string();
    return t;
  }
  return std::nullopt;
}

}  // namespace troupe::apps
