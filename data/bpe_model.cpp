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

// Words up to this many starting symbols merge with the scan loop, on stack arrays.
constexpr size_t kScanMaxSymbols = 128;

// HF's byte_fallback spelling of byte b: "<0x0A>".
std::string fallback_spelling(unsigned b) {
  const char* hex = "0123456789ABCDEF";
  return str_cat("<0x", hex[b >> 4], hex[b & 15], ">");
}

}  // namespace

BpeModel BpeModel::build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                         const std::vector<std::pair<std::string, std::string>>& merges, const Options& options,
                         const std::string& vocab_name, const std::function<std::string(size_t)>& merge_name) {
  BpeModel m;
  m.options_ = options;

  // --- vocabulary
  TROUPE_CHECK(!vocab.empty(), vocab_name, ": the vocabulary is empty");
  int64_t max_id = -1;
  m.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    TROUPE_CHECK(id >= 0 && id < INT32_MAX, vocab_name, ": the id of token \"", token, "\" is out of range: ", id);
    m.vocab_.emplace(token, int32_t(id));
    max_id = std::max(max_id, id);
  }
  const size_t n = size_t(max_id + 1);
  std::vector<std::string_view> spelled(n);
  m.present_.assign(n, 0);
  for (const auto& [token, id] : m.vocab_) {
    TROUPE_CHECK(!m.present_[size_t(id)], vocab_name, ": id ", id, " is given to two tokens, \"", spelled[size_t(id)],
                 "\" and \"", token, "\"");
    m.present_[size_t(id)] = 1;
    spelled[size_t(id)] = token;
  }
  m.spelled_offset_.assign(n + 1, 0);
  m.bytes_offset_.assign(n + 1, 0);
  for (size_t id = 0; id < n; ++id) {
    m.spelled_ += spelled[id];
    m.spelled_offset_[id + 1] = uint32_t(m.spelled_.size());
    m.bytes_ += options.byte_level ? unicode_string_to_bytes(spelled[id]) : std::string(spelled[id]);
    m.bytes_offset_[id + 1] = uint32_t(m.bytes_.size());
  }

  // --- the starting symbols
  if (options.byte_level) {
    for (int b = 0; b < 256; ++b) {
      std::string one;
      append_utf8(one, byte_to_unicode(uint8_t(b)));
      const int32_t id = m.token_id(one);
      TROUPE_CHECK(id >= 0, vocab_name, ": no token for byte 0x", "0123456789abcdef"[b >> 4],
                   "0123456789abcdef"[b & 15], " (spelled \"", one, "\"); not a byte-level BPE vocabulary");
      m.byte_ids_[size_t(b)] = id;
    }
  } else {
    for (const auto& [token, id] : m.vocab_) {
      char32_t cp;
      if (!token.empty() && decode_utf8(token, 0, cp) == int(token.size())) m.char_ids_.emplace(cp, id);
    }
    for (unsigned b = 0; b < 256; ++b) m.fallback_ids_[b] = m.token_id(fallback_spelling(b));
  }
  if (!options.unk_token.empty()) {
    m.unk_id_ = m.token_id(options.unk_token);
    TROUPE_CHECK(m.unk_id_ >= 0, vocab_name, ": the unknown token \"", options.unk_token,
                 "\" is not in the vocabulary");
  }

  // --- merges, best first
  TROUPE_CHECK(merges.size() < size_t(INT32_MAX), vocab_name, ": too many merges");
  m.num_merges_ = int64_t(merges.size());
  const size_t slots = std::bit_ceil(std::max<size_t>(16, 2 * merges.size()));
  m.pairs_.assign(slots, Pair{kEmptyKey, 0, 0});
  m.pair_mask_ = slots - 1;
  m.pair_shift_ = 64 - std::countr_zero(slots);
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t l = m.token_id(left), r = m.token_id(right);
    TROUPE_CHECK(l >= 0, merge_name(rank), ": token \"", left, "\" is not in ", vocab_name);
    TROUPE_CHECK(r >= 0, merge_name(rank), ": token \"", right, "\" is not in ", vocab_name);
    joined.assign(left).append(right);
    const int32_t j = m.token_id(joined);
    TROUPE_CHECK(j >= 0, merge_name(rank), ": merged token \"", joined, "\" is not in ", vocab_name);
    const uint64_t key = (uint64_t(uint32_t(l)) << 32) | uint32_t(r);
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m.pair_shift_;
    while (m.pairs_[i].key != kEmptyKey && m.pairs_[i].key != key) i = (i + 1) & m.pair_mask_;
    m.pairs_[i] = Pair{key, int32_t(rank), j};  // a repeated merge takes its later rank, as in HF
  }
  return m;
}

BpeModel BpeModel::parse(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                         const std::string& merges_name) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::parse_error& e) {
    TROUPE_FAIL("vocab file ", vocab_name, ": malformed JSON: ", e.what());
  }
  TROUPE_CHECK(vocab.is_object(), "vocab file ", vocab_name, ": expected a JSON object {token: id}, got ",
               vocab.type_name());
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    TROUPE_CHECK(value.is_number_integer(), "vocab file ", vocab_name, ": the id of token \"", token,
                 "\" is not an integer: ", value.dump());
    entries.emplace_back(token, value.get<int64_t>());
  }

  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> line_of;  // merges[i] is on line line_of[i]
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
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    line_of.push_back(line_no);
  }
  return build(entries, merges, Options{}, "vocab file " + vocab_name,
               [&](size_t i) { return str_cat("merge file ", merges_name, ":", line_of[i]); });
}

int32_t BpeModel::token_id(std::string_view spelled) const {
  const auto it = vocab_.find(spelled);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out, MergeLoop loop) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = options_.byte_level ? token_id(bytes_to_unicode_string(word)) : token_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  int32_t small[kScanMaxSymbols];
  size_t n;
  if (options_.byte_level) {
    n = word.size();
    if (n <= kScanMaxSymbols) {
      for (size_t i = 0; i < n; ++i) small[i] = byte_ids_[static_cast<unsigned char>(word[i])];
    } else {
      symbols.resize(n);
      for (size_t i = 0; i < n; ++i) symbols[i] = byte_ids_[static_cast<unsigned char>(word[i])];
    }
  } else {
    char_symbols(word, symbols);
    n = symbols.size();
    if (n <= kScanMaxSymbols) std::copy(symbols.begin(), symbols.end(), small);
  }
  if (loop == MergeLoop::scan || (loop == MergeLoop::automatic && n <= kScanMaxSymbols)) {
    TROUPE_CHECK(n <= kScanMaxSymbols, "bpe: the scan merge loop takes at most ", kScanMaxSymbols, " symbols, got ", n);
    merge_scan(small, n, out);
  } else {
    if (symbols.empty()) symbols.assign(small, small + n);
    merge_heap(std::move(symbols), out);
  }
}

// HF's BPE::merge_word before the merges: a known character is its token; an unknown one its
// bytes' "<0xXX>" tokens when all exist (byte_fallback), else the unknown token, which
// absorbs the unknown characters right after it (fuse_unk). As in HF, byte fallback tokens go
// out before a pending unknown token.
void BpeModel::char_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  bool unk_pending = false;
  for (size_t i = 0; i < word.size();) {
    char32_t cp;
    int len = decode_utf8(word, i, cp);
    if (len == 0) len = 1;  // not UTF-8: an unknown character of one byte
    const auto known = len > 1 || static_cast<unsigned char>(word[i]) < 0x80 ? char_ids_.find(cp) : char_ids_.end();
    if (known != char_ids_.end()) {
      if (unk_pending) symbols.push_back(unk_id_);
      unk_pending = false;
      symbols.push_back(known->second);
      i += size_t(len);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (int k = 0; k < len; ++k) all = all && fallback_ids_[static_cast<unsigned char>(word[i + size_t(k)])] >= 0;
      if (all) {
        for (int k = 0; k < len; ++k) symbols.push_back(fallback_ids_[static_cast<unsigned char>(word[i + size_t(k)])]);
        i += size_t(len);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending && !options_.fuse_unk) symbols.push_back(unk_id_);
      unk_pending = true;
    }
    i += size_t(len);
  }
  if (unk_pending) symbols.push_back(unk_id_);
}

// Symbols and the (rank, merged id) of each adjacent pair live in stack arrays; each step
// merges the lowest-ranked pair (leftmost on ties), then re-looks-up only its two neighbours.
void BpeModel::merge_scan(int32_t* sym, size_t n, std::vector<int32_t>& out) const {
  int32_t rank[kScanMaxSymbols];  // rank[i]: pair (sym[i], sym[i+1]); INT32_MAX when no merge
  int32_t merged[kScanMaxSymbols];
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
void BpeModel::merge_heap(std::vector<int32_t> sym, std::vector<int32_t>& out) const {
  TROUPE_CHECK(sym.size() < size_t(INT32_MAX), "bpe: word too long: ", sym.size(), " symbols");
  if (sym.empty()) return;
  const int32_t n = int32_t(sym.size());
  std::vector<int32_t> prev(sym.size()), next(sym.size());
  for (int32_t i = 0; i < n; ++i) {
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
