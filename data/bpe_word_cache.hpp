// A cache from pre-token bytes to their BPE ids. Real text repeats a small set of words, so
// nearly every pre-token is a hit; keys and ids live in two flat arenas, so a hit allocates
// nothing and a miss only appends. When full it is cleared wholesale (no LRU bookkeeping).
// Not thread-safe: each tokenizer copy has its own.
//
//   BpeWordCache cache;
//   cache.encode_word(model, piece, ids);   // appends piece's ids, from the cache or the model
//
//   const uint64_t h = BpeWordCache::hash(piece);   // or by hand
//   std::span<const int32_t> ids;
//   if (!cache.find(piece, h, ids)) { ...run BPE...; cache.insert(piece, h, new_ids); }
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_model.hpp"

namespace troupe {

class BpeWordCache {
 public:
  explicit BpeWordCache(size_t max_entries = size_t(1) << 16) : max_entries_(max_entries) {}

  static uint64_t hash(std::string_view word) {
    const auto* p = reinterpret_cast<const unsigned char*>(word.data());
    size_t n = word.size();
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 29;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i) w |= uint64_t(p[i]) << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return h == 0 ? 1 : h;  // 0 marks a free slot
  }

  bool find(std::string_view word, uint64_t h, std::span<const int32_t>& ids) const {
    if (slots_.empty()) return false;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == h && s.key_len == word.size() &&
          std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
        ids = std::span<const int32_t>(values_.data() + s.value_off, s.value_len);
        return true;
      }
    }
  }

  // `word` must not be present already.
  void insert(std::string_view word, uint64_t h, std::span<const int32_t> ids);

  // Appends the ids of one pre-token: from the cache, or from model.encode_word (then cached,
  // unless longer than kMaxCachedBytes: long digit or whitespace runs are rare and would crowd
  // the cache).
  void encode_word(const BpeModel& model, std::string_view word, std::vector<int32_t>& ids);
  static constexpr size_t kMaxCachedBytes = 64;

  size_t size() const { return size_; }
  void clear();

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: free
    uint32_t key_off = 0, key_len = 0;
    uint32_t value_off = 0, value_len = 0;
  };
  size_t max_entries_;
  size_t size_ = 0;
  size_t mask_ = 0;
  std::vector<Slot> slots_;  // allocated on first insert: 2 * max_entries (power of two)
  std::string keys_;
  std::vector<int32_t> values_;
};

}  // namespace troupe
