// tokenizer.json's "added_tokens": tokens matched in the text before the model sees it, as HF's
// AddedVocabulary does. Tokens with normalized: false are found in the raw input; the stretches
// between them are normalized, then the normalized: true tokens are found in those (by their
// normalized form). Matching is leftmost-longest; single_word, lstrip and rstrip behave as in
// HF. Each token gets the id HF's add_tokens would give it (its id in the model's vocabulary
// when it has one, else the next free id); a file whose ids disagree is refused, as is a
// pattern given twice.
//
//   AddedVocabulary added = AddedVocabulary::parse(j["added_tokens"], normalizer, model, file);
//   added.split("a<|eot_id|>b", false, sections);   // {0,1,-1} {1,11,128009} {11,12,-1}
//   added.token(128009)->special                    // true
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/bpe_model.hpp"
#include "data/hf_tokenizer/normalizer.hpp"
#include "data/hf_tokenizer/scratch.hpp"

namespace troupe::hf {

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
  std::string pattern;  // what is matched, and what decode() gives: content, or its normalized form
};

class AddedVocabulary {
 public:
  static AddedVocabulary parse(const nlohmann::json& j, const Normalizer& normalizer, const BpeModel& model,
                               const std::string& file);

  // Whether some token is matched in normalized text.
  bool has_normalized() const { return !normalized_.order.empty(); }
  // Splits `text` into `out` (cleared first): the tokens of one set (normalized: false tokens
  // for raw text, normalized: true ones for normalized text) and the stretches between them,
  // which may be empty.
  void split(std::string_view text, bool normalized, std::vector<Section>& out) const;

  const AddedToken* token(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  // One more than the largest id (0 when there are none).
  int64_t id_end() const { return id_end_; }

 private:
  // The patterns of one set, sorted, and the bytes they can start with.
  struct Matcher {
    std::vector<size_t> order;  // indices into tokens_
    std::array<bool, 256> first{};
  };
  void build(Matcher& m, bool normalized, const std::string& file);
  // The longest pattern of `m` that starts at text[pos], as an index into tokens_.
  std::optional<size_t> longest_at(const Matcher& m, std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_, normalized_;
  int64_t id_end_ = 0;
};

}  // namespace troupe::hf
