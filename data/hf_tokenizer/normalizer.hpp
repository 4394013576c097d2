// tokenizer.json's "normalizer": the text transformations HF applies to each stretch of input
// between added tokens before pre-tokenizing. Implemented: NFC, NFD, NFKC, NFKD (utf8proc),
// Lowercase, Prepend, Replace (String or Regex pattern), Strip, and Sequence of them; any other
// type (BertNormalizer, Precompiled, StripAccents, Nmt, ByteLevel, ...) is refused by name.
//
//   Normalizer n = Normalizer::parse(j["normalizer"], "mistral/tokenizer.json");
//   std::string text = "Hello world";
//   n.normalize(text, scratch);          // "▁Hello▁world" for Mistral's Prepend + Replace
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/hf_tokenizer/onig_regex.hpp"
#include "data/hf_tokenizer/scratch.hpp"

namespace troupe::hf {

class Normalizer {
 public:
  // `j`: the "normalizer" value (null: none). Throws troupe::Error naming `file`, the
  // component and what is not implemented.
  static Normalizer parse(const nlohmann::json& j, const std::string& file);

  bool empty() const { return steps_.empty(); }
  // Normalizes `text` (valid UTF-8) in place.
  void normalize(std::string& text, EncodeScratch& scratch) const;

 private:
  enum class Kind { unicode, lowercase, prepend, replace, strip };
  struct Step {
    Kind kind;
    int utf8proc_options = 0;          // unicode: NFC, NFD, NFKC or NFKD
    std::string content;               // prepend: the prefix; replace: the replacement
    std::optional<Regex> pattern;      // replace
    bool left = false, right = false;  // strip
  };
  void add(const nlohmann::json& j, const std::string& where, const std::string& file);

  std::vector<Step> steps_;  // Sequence flattened
};

}  // namespace troupe::hf
