// A BPE model: token ids, merge ranks, and the merge loop that turns one pre-token into token
// ids, as HF tokenizers' BPE model does. Two ways to read a pre-token:
//   byte-level (GPT-2, Llama 3, Qwen): the pre-token is raw bytes, each starting as the token
//     that spells it in GPT-2's byte alphabet (byte_unicode.hpp);
//   character-level (SentencePiece-style, Mistral): the pre-token is UTF-8 text, each
//     character starting as its own token; a character the vocabulary lacks becomes its bytes'
//     "<0xXX>" tokens (byte_fallback) or the unknown token (fused when consecutive, fuse_unk).
// Immutable once built, so one model is shared by every tokenizer copy and thread.
//
//   BpeModel m = BpeModel::parse(vocab_json, merges_txt, "gpt2-vocab.json", "gpt2-merges.txt");
//   std::vector<int32_t> ids;
//   m.encode_word(" Hello", ids);          // ids == {18435}
//   m.token_bytes(18435) == " Hello"
//
//   BpeModel::Options sp{.byte_level = false, .byte_fallback = true, .unk_token = "<unk>"};
//   BpeModel s = BpeModel::build(vocab, merges, sp, "tokenizer.json model.vocab", where);
//   s.encode_word("\u2581Hello\n", ids);   // "▁Hello" and "<0x0A>"
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

class BpeModel {
 public:
  struct Options {
    bool byte_level = true;      // pre-tokens are raw bytes (else UTF-8 characters)
    bool ignore_merges = false;  // a pre-token that is a vocabulary token is that token, unmerged
    bool byte_fallback = false;  // an unknown character becomes its bytes' "<0xXX>" tokens
    bool fuse_unk = false;       // consecutive unknown characters become one unknown token
    std::string unk_token;       // empty: unknown characters are dropped (HF without unk_token)
  };

  // A vocabulary ({token spelling, id}) and merges (best first), as HF's BpeBuilder takes
  // them. `vocab_name` names the vocabulary in errors, `merge_name(i)` the i-th merge
  // ("merge file m.txt:3"). Throws troupe::Error on an id out of range or given twice, a merge
  // part or result missing from the vocabulary, a byte-level vocabulary without all 256 byte
  // tokens, an unk_token not in the vocabulary. A merge listed twice takes its later rank, as
  // HF's merge map does.
  static BpeModel build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges, const Options& options,
                        const std::string& vocab_name, const std::function<std::string(size_t)>& merge_name);

  // GPT-2's files. vocab_json: a JSON object {token spelled in byte-level form: id};
  // merges_txt: an optional "#version" line, then one "left right" merge per line, best first.
  // `vocab_name` and `merges_name` name the sources in errors (malformed JSON, a bad merge line
  // with its line number, ...).
  static BpeModel parse(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                        const std::string& merges_name);

  // How encode_word merges: `scan` finds the best pair by a linear scan per merge (fast for the
  // short words of real text), `heap` keeps a priority queue (O(n log n), for long runs such as
  // a megabyte of digits); `automatic` picks by length. Both apply HF's rule: lowest rank
  // first, leftmost on ties.
  enum class MergeLoop { automatic, scan, heap };

  // Appends the ids of one pre-token: raw bytes (byte-level) or UTF-8 text.
  void encode_word(std::string_view word, std::vector<int32_t>& out, MergeLoop loop = MergeLoop::automatic) const;

  const Options& options() const { return options_; }
  // One more than the largest id.
  int64_t vocab_size() const { return int64_t(present_.size()); }
  // The number of tokens (HF's get_vocab_size; less than vocab_size() when ids have gaps).
  int64_t num_tokens() const { return int64_t(vocab_.size()); }
  int64_t num_merges() const { return num_merges_; }
  // The id of a token by its spelling in the vocabulary ("Ġworld", "▁Hello"), or -1.
  int32_t token_id(std::string_view spelled) const;
  // Whether some token has this id (ids may have gaps).
  bool has_id(int64_t id) const { return id >= 0 && id < vocab_size() && present_[size_t(id)]; }
  // The spelling of token `id` (has_id(id) must hold).
  std::string_view token_spelling(int32_t id) const { return slice(spelled_, spelled_offset_, id); }
  // Byte-level models: the raw bytes of token `id` (has_id(id) must hold).
  std::string_view token_bytes(int32_t id) const { return slice(bytes_, bytes_offset_, id); }

 private:
  struct Pair {
    uint64_t key;  // left id << 32 | right id; kEmptyKey when the slot is free
    int32_t rank;
    int32_t merged;  // the id of left + right
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);

  // Heterogeneous lookup: find(std::string_view) without a temporary std::string.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  static std::string_view slice(const std::string& arena, const std::vector<uint32_t>& offset, int32_t id) {
    return std::string_view(arena).substr(offset[size_t(id)], offset[size_t(id) + 1] - offset[size_t(id)]);
  }
  const Pair* find_pair(int32_t left, int32_t right) const {
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> pair_shift_;; i = (i + 1) & pair_mask_) {
      const Pair& p = pairs_[i];
      if (p.key == key) return &p;
      if (p.key == kEmptyKey) return nullptr;
    }
  }
  // The starting symbols of a character-level word (characters, byte fallbacks, unknowns).
  void char_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  // Merges symbols[0, n) in place (n <= kScanMaxSymbols) and appends the result.
  void merge_scan(int32_t* symbols, size_t n, std::vector<int32_t>& out) const;
  void merge_heap(std::vector<int32_t> symbols, std::vector<int32_t>& out) const;

  Options options_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;  // spelling -> id
  std::unordered_map<char32_t, int32_t> char_ids_;  // character-level: single-character tokens
  std::array<int32_t, 256> byte_ids_{};             // byte-level: the token of each byte
  std::array<int32_t, 256> fallback_ids_{};         // byte_fallback: the "<0xXX>" tokens (-1: none)
  int32_t unk_id_ = -1;
  std::vector<Pair> pairs_;  // open addressing, power-of-two size
  uint64_t pair_mask_ = 0;
  int pair_shift_ = 64;
  int64_t num_merges_ = 0;
  std::string spelled_;                   // the spellings of all tokens, by id
  std::vector<uint32_t> spelled_offset_;  // (vocab_size + 1): token id's spelling is [off[id], off[id+1])
  std::string bytes_;                     // byte-level: the raw bytes of all tokens, by id
  std::vector<uint32_t> bytes_offset_;    // (vocab_size + 1), as spelled_offset_
  std::vector<uint8_t> present_;          // (vocab_size)
};

}  // namespace troupe
