// tokenizer.json's "decoder": how HF turns the tokens of decode(ids) back into text. Implemented:
// ByteLevel (bytes joined, ill-formed UTF-8 replaced by U+FFFD per maximal subpart, as Rust's
// from_utf8_lossy), Metaspace, Replace, ByteFallback (a run of "<0xXX>" tokens that is not
// UTF-8 gives one U+FFFD per byte, as HF), Fuse, Strip, and Sequence of them; any other type
// (WordPiece, BPEDecoder, CTC, ...) is refused by name. Without a decoder, HF joins the tokens
// with spaces.
//
//   Decoder d = Decoder::parse(j["decoder"], "mistral/tokenizer.json");
//   d.decode({"<s>", "\u2581Hello", "<0x0A>"})  // "<s> Hello\n"
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/hf_tokenizer/onig_regex.hpp"

namespace troupe::hf {

class Decoder {
 public:
  // `j`: the "decoder" value (null: none).
  static Decoder parse(const nlohmann::json& j, const std::string& file);

  // HF's Decoder::decode: each step rewrites the list of token strings, then they are joined.
  std::string decode(std::vector<std::string> tokens) const;
  // Exactly one ByteLevel step: decode() is the tokens' bytes, made valid UTF-8.
  bool byte_level_only() const { return steps_.size() == 1 && steps_[0].kind == Kind::byte_level; }

 private:
  enum class Kind { byte_level, metaspace, replace, byte_fallback, fuse, strip };
  struct Step {
    Kind kind;
    std::string text;              // metaspace: the replacement; replace: the content; strip: the character
    char32_t character = 0;        // metaspace, strip
    bool prepend = true;           // metaspace: prepend_scheme is not "never"
    std::optional<Regex> pattern;  // replace
    int64_t start = 0, stop = 0;   // strip
  };
  void add(const nlohmann::json& j, const std::string& where, const std::string& file);
  void run(const Step& step, std::vector<std::string>& tokens) const;

  std::vector<Step> steps_;  // Sequence flattened
  bool none_ = true;         // no decoder: join with spaces
};

}  // namespace troupe::hf
