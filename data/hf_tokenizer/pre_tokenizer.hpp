// tokenizer.json's "pre_tokenizer": how HF splits normalized text into the pieces the model
// encodes one at a time. Implemented: Split (Regex or String pattern, invert, every behavior:
// Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous), ByteLevel (add_prefix_space,
// use_regex with GPT-2's regex), Metaspace, Digits, Whitespace, WhitespaceSplit, and Sequence of
// them; any other type (BertPreTokenizer, Punctuation, UnicodeScripts, CharDelimiterSplit,
// FixedLength, ...) is refused by name, as is a step after ByteLevel (whose output HF spells in
// the byte alphabet; here pieces stay raw bytes and the model reads them byte-level).
//
//   PreTokenizer p = PreTokenizer::parse(j["pre_tokenizer"], "llama3/tokenizer.json");
//   p.pre_tokenize("Hello  world's", true, scratch);
//   // scratch.spans over scratch.pieces_text: "Hello", " ", " world", "'s"
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/hf_tokenizer/onig_regex.hpp"
#include "data/hf_tokenizer/scratch.hpp"

namespace troupe::hf {

// HF's SplitDelimiterBehavior: what becomes of the stretches a pattern matched.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// HF's NormalizedString::split: keeps the [begin, end) of each stretch of `flagged` (which covers
// a piece in order) as `behavior` says, into `kept` (cleared first); may hold empty stretches.
void split_flagged(const std::vector<Flagged>& flagged, SplitBehavior behavior,
                   std::vector<std::pair<uint32_t, uint32_t>>& kept);

class PreTokenizer {
 public:
  // `j`: the "pre_tokenizer" value (null: none).
  static PreTokenizer parse(const nlohmann::json& j, const std::string& file);

  bool empty() const { return steps_.empty(); }
  // Ends with ByteLevel: the model must read pieces as raw bytes.
  bool byte_level() const { return !steps_.empty() && steps_.back().kind == Kind::byte_level; }
  // Splits `text` into scratch.spans over scratch.pieces_text (which is `text` itself unless a
  // step rewrote it). `at_origin`: `text` starts the input.
  void pre_tokenize(std::string_view text, bool at_origin, EncodeScratch& scratch) const;

 private:
  enum class Kind { split, byte_level, metaspace, digits, whitespace, whitespace_split };
  enum class Prepend { always, first, never };
  struct Step {
    Kind kind;
    std::optional<Regex> regex;  // split, whitespace
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    bool add_prefix_space = false, use_regex = false;  // byte_level
    std::string replacement;                           // metaspace, as UTF-8
    char32_t replacement_cp = 0;
    Prepend prepend = Prepend::always;
    bool split = true;               // metaspace
    bool individual_digits = false;  // digits
  };
  void add(const nlohmann::json& j, const std::string& where, const std::string& file);
  void run(const Step& step, EncodeScratch& s) const;

  std::vector<Step> steps_;  // Sequence flattened
};

}  // namespace troupe::hf
