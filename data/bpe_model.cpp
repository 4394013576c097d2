#include "data/bpe_model.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <queue>

#include <nlohmann/json.hpp>

#include "data/byte_unicode.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

// Words up to this many bytes merge with the scan loop, on stack arrays.
constexpr size_t kScanMaxBytes = 128;

}  // namespace

BpeModel BpeModel::parse(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                         const std::string& merges_name) {
  BpeModel m;

  // --- vocabulary
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::parse_error& e) {
    TROUPE_FAIL("vocab file ", vocab_name, ": malformed JSON: ", e.what());
  }
  TROUPE_CHECK(vocab.is_object(), "vocab file ", vocab_name, ": expected a JSON object {token: id}, got ",
               vocab.type_name());
  TROUPE_CHECK(!vocab.empty(), "vocab file ", vocab_name, ": the vocabulary is empty");
  int64_t max_id = -1;
  m.vocab_.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    TROUPE_CHECK(value.is_number_integer(), "vocab file ", vocab_name, ": the id of token \"", token,
                 "\" is not an integer: ", value.dump());
    const int64_t id = value.get<int64_t>();
    TROUPE_CHECK(id >= 0 && id < INT32_MAX, "vocab file ", vocab_name, ": the id of token \"", token,
                 "\" is out of range: ", id);
    m.vocab_.emplace(token, int32_t(id));
    max_id = std::max(max_id, id);
  }
  const size_t n = size_t(max_id + 1);
  std::vector<std::string_view> spelled(n);
  m.present_.assign(n, 0);
  for (const auto& [token, id] : m.vocab_) {
    TROUPE_CHECK(!m.present_[size_t(id)], "vocab file ", vocab_name, ": id ", id, " is given to two tokens, \"",
                 spelled[size_t(id)], "\" and \"", token, "\"");
    m.present_[size_t(id)] = 1;
    spelled[size_t(id)] = token;
  }
  m.bytes_offset_.assign(n + 1, 0);
  for (size_t id = 0; id < n; ++id) {
    m.bytes_ += unicode_string_to_bytes(spelled[id]);
    m.bytes_offset_[id + 1] = uint32_t(m.bytes_.size());
  }
  for (int b = 0; b < 256; ++b) {
    std::string one;
    append_utf8(one, byte_to_unicode(uint8_t(b)));
    const int32_t id = m.token_id(one);
    TROUPE_CHECK(id >= 0, "vocab file ", vocab_name, ": no token for byte 0x", "0123456789abcdef"[b >> 4],
                 "0123456789abcdef"[b & 15], " (spelled \"", one, "\"); not a byte-level BPE vocabulary");
    m.byte_ids_[size_t(b)] = id;
  }

  // --- merges, best first
  struct Merge {
    int32_t left, right, merged;
  };
  std::vector<Merge> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t eol = merges_txt.find('\n', pos);
    if (eol == std::string_view::npos) eol = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    TROUPE_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string_view::npos,
                 "merge file ", merges_name, ":", line_no, ": expected two tokens separated by one space, got \"", line,
                 "\"");
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const int32_t l = m.token_id(left), r = m.token_id(right);
    TROUPE_CHECK(l >= 0, "merge file ", merges_name, ":", line_no, ": token \"", left, "\" is not in vocab file ",
                 vocab_name);
    TROUPE_CHECK(r >= 0, "merge file ", merges_name, ":", line_no, ": token \"", right, "\" is not in vocab file ",
                 vocab_name);
    const std::string joined = str_cat(left, right);
    const int32_t j = m.token_id(joined);
    TROUPE_CHECK(j >= 0, "merge file ", merges_name, ":", line_no, ": merged token \"", joined,
                 "\" is not in vocab file ", vocab_name);
    merges.push_back({l, r, j});
  }
  TROUPE_CHECK(merges.size() < size_t(INT32_MAX), "merge file ", merges_name, ": too many merges");
  m.num_merges_ = int64_t(merges.size());

  const size_t slots = std::bit_ceil(std::max<size_t>(16, 2 * merges.size()));
  m.pairs_.assign(slots, Pair{kEmptyKey, 0, 0});
  m.pair_mask_ = slots - 1;
  m.pair_shift_ = 64 - std::countr_zero(slots);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& mg = merges[rank];
    const uint64_t key = (uint64_t(uint32_t(mg.left)) << 32) | uint32_t(mg.right);
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m.pair_shift_;
    while (m.pairs_[i].key != kEmptyKey && m.pairs_[i].key != key) i = (i + 1) & m.pair_mask_;
    if (m.pairs_[i].key == key) continue;  // a repeated merge keeps its first (best) rank
    m.pairs_[i] = Pair{key, int32_t(rank), mg.merged};
  }
  return m;
}

int32_t BpeModel::token_id(std::string_view spelled) const {
  const auto it = vocab_.find(std::string(spelled));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out, MergeLoop loop) const {
  if (bytes.empty()) return;
  if (loop == MergeLoop::scan || (loop == MergeLoop::automatic && bytes.size() <= kScanMaxBytes)) {
    TROUPE_CHECK(bytes.size() <= kScanMaxBytes, "bpe: the scan merge loop takes at most ", kScanMaxBytes,
                 " bytes, got ", bytes.size());
    encode_scan(bytes, out);
  } else {
    encode_heap(bytes, out);
  }
}

// Symbols and the (rank, merged id) of each adjacent pair live in stack arrays; each step
// merges the lowest-ranked pair (leftmost on ties), then re-looks-up only its two neighbours.
void BpeModel::encode_scan(std::string_view bytes, std::vector<int32_t>& out) const {
  int32_t sym[kScanMaxBytes];
  int32_t rank[kScanMaxBytes];  // rank[i]: pair (sym[i], sym[i+1]); INT32_MAX when no merge
  int32_t merged[kScanMaxBytes];
  size_t n = bytes.size();
  for (size_t i = 0; i < n; ++i) sym[i] = byte_ids_[static_cast<unsigned char>(bytes[i])];
  auto look_up = [&](size_t i) {
    const Pair* p = find_pair(sym[i], sym[i + 1]);
    rank[i] = p ? p->rank : INT32_MAX;
    merged[i] = p ? p->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT32_MAX) break;
    sym[best] = merged[best];
    // Drop symbol best+1 and pair best+1.
    for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) look_up(best - 1);
    if (best + 1 < n) look_up(best);
  }
  out.insert(out.end(), sym, sym + n);
}

// HF's Word::merge_all: a min-heap of (rank, position), symbols in a linked list; entries
// whose pair has changed since they were pushed are skipped when popped.
void BpeModel::encode_heap(std::string_view bytes, std::vector<int32_t>& out) const {
  const int32_t n = int32_t(bytes.size());
  TROUPE_CHECK(bytes.size() < size_t(INT32_MAX), "bpe: word too long: ", bytes.size(), " bytes");
  const size_t len = bytes.size();
  std::vector<int32_t> sym(len), prev(len), next(len);
  for (int32_t i = 0; i < n; ++i) {
    sym[size_t(i)] = byte_ids_[static_cast<unsigned char>(bytes[size_t(i)])];
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position of the left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t i) {
    if (const Pair* p = find_pair(sym[size_t(i)], sym[size_t(next[size_t(i)])])) heap.push({p->rank, i});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    const int32_t j = next[size_t(i)];
    if (sym[size_t(i)] < 0 || j < 0) continue;  // symbol merged away, or now last
    const Pair* p = find_pair(sym[size_t(i)], sym[size_t(j)]);
    if (!p || p->rank != r) continue;  // stale: the pair at i changed
    sym[size_t(i)] = p->merged;
    sym[size_t(j)] = -1;
    next[size_t(i)] = next[size_t(j)];
    if (next[size_t(i)] >= 0) prev[size_t(next[size_t(i)])] = i;
    if (prev[size_t(i)] >= 0) push(prev[size_t(i)]);
    if (next[size_t(i)] >= 0) push(i);
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(sym[size_t(i)]);
}

}  // namespace troupe
