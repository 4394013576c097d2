#include "data/bpe_word_cache.hpp"

#include <algorithm>
#include <bit>

namespace troupe {

void BpeWordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  values_.clear();
  size_ = 0;
}

void BpeWordCache::insert(std::string_view word, uint64_t h, std::span<const int32_t> ids) {
  if (max_entries_ == 0) return;
  if (slots_.empty()) {
    slots_.resize(std::bit_ceil(2 * max_entries_));
    mask_ = slots_.size() - 1;
  }
  // Offsets are 32-bit: start over well before they could wrap.
  if (size_ >= max_entries_ || keys_.size() + word.size() > (size_t(1) << 31) ||
      values_.size() + ids.size() > (size_t(1) << 30))
    clear();
  size_t i = h & mask_;
  while (slots_[i].hash != 0) i = (i + 1) & mask_;
  slots_[i] = Slot{h, uint32_t(keys_.size()), uint32_t(word.size()), uint32_t(values_.size()), uint32_t(ids.size())};
  keys_.append(word);
  values_.insert(values_.end(), ids.begin(), ids.end());
  ++size_;
}

void BpeWordCache::encode_word(const BpeModel& model, std::string_view word, std::vector<int32_t>& ids) {
  if (word.size() > kMaxCachedBytes) {
    model.encode_word(word, ids);
    return;
  }
  const uint64_t h = hash(word);
  std::span<const int32_t> hit;
  if (find(word, h, hit)) {
    ids.insert(ids.end(), hit.begin(), hit.end());
    return;
  }
  const size_t first = ids.size();
  model.encode_word(word, ids);
  insert(word, h, std::span<const int32_t>(ids.data() + first, ids.size() - first));
}

}  // namespace troupe
