// The byte-level BPE model of a GPT-2-style vocabulary: token ids, merge ranks, and the merge
// loop that turns the bytes of one pre-token into token ids. Immutable once parsed, so one
// model is shared by every tokenizer copy and thread.
//
//   BpeModel m = BpeModel::parse(vocab_json, merges_txt, "gpt2-vocab.json", "gpt2-merges.txt");
//   std::vector<int32_t> ids;
//   m.encode_word(" Hello", ids);          // ids == {18435}
//   m.token_bytes(18435) == " Hello"
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe {

class BpeModel {
 public:
  // vocab_json: a JSON object {token spelled in byte-level form: id}; merges_txt: an optional
  // "#version" line, then one "left right" merge per line, best first. `vocab_name` and
  // `merges_name` name the sources in errors (troupe::Error: malformed JSON, a bad merge line
  // with its line number, a merge part or result missing from the vocabulary, ...).
  static BpeModel parse(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                        const std::string& merges_name);

  // How encode_word merges: `scan` finds the best pair by a linear scan per merge (fast for the
  // short words of real text), `heap` keeps a priority queue (O(n log n), for long runs such as
  // a megabyte of digits); `automatic` picks by length. Both apply HF's rule: lowest rank
  // first, leftmost on ties.
  enum class MergeLoop { automatic, scan, heap };

  // Appends the ids of one pre-token, given as raw bytes.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out, MergeLoop loop = MergeLoop::automatic) const;

  // One more than the largest id.
  int64_t vocab_size() const { return int64_t(bytes_offset_.size()) - 1; }
  int64_t num_merges() const { return num_merges_; }
  // The id of a token spelled in byte-level form ("Ġworld"), or -1.
  int32_t token_id(std::string_view spelled) const;
  // Whether some token has this id (ids may have gaps).
  bool has_id(int64_t id) const { return id >= 0 && id < vocab_size() && present_[size_t(id)]; }
  // The raw bytes of token `id` (has_id(id) must hold).
  std::string_view token_bytes(int32_t id) const {
    return std::string_view(bytes_).substr(bytes_offset_[size_t(id)],
                                           bytes_offset_[size_t(id) + 1] - bytes_offset_[size_t(id)]);
  }

 private:
  struct Pair {
    uint64_t key;  // left id << 32 | right id; kEmptyKey when the slot is free
    int32_t rank;
    int32_t merged;  // the id of left + right
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);

  const Pair* find_pair(int32_t left, int32_t right) const {
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> pair_shift_;; i = (i + 1) & pair_mask_) {
      const Pair& p = pairs_[i];
      if (p.key == key) return &p;
      if (p.key == kEmptyKey) return nullptr;
    }
  }
  void encode_scan(std::string_view bytes, std::vector<int32_t>& out) const;
  void encode_heap(std::string_view bytes, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;  // byte-level spelling -> id
  std::array<int32_t, 256> byte_ids_{};             // id of each single-byte token
  std::vector<Pair> pairs_;                         // open addressing, power-of-two size
  uint64_t pair_mask_ = 0;
  int pair_shift_ = 64;
  int64_t num_merges_ = 0;
  std::string bytes_;                   // raw bytes of all tokens, by id
  std::vector<uint32_t> bytes_offset_;  // (vocab_size + 1): token id's bytes are [off[id], off[id+1])
  std::vector<uint8_t> present_;        // (vocab_size)
};

}  // namespace troupe
