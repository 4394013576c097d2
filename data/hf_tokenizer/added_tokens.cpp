#include "data/hf_tokenizer/added_tokens.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/hf_tokenizer/json_reader.hpp"
#include "data/hf_tokenizer/unicode_props.hpp"

namespace troupe::hf {

AddedVocabulary AddedVocabulary::parse(const nlohmann::json& j, const Normalizer& normalizer, const BpeModel& model,
                                       const std::string& file) {
  AddedVocabulary v;
  if (j.is_null()) return v;
  TROUPE_CHECK(j.is_array(), file, ": added_tokens is not a list");
  // HF's AddedVocabulary::add_tokens: a token already known keeps its id, a new one takes the
  // next id after the model's vocabulary.
  int64_t next_id = model.num_tokens();
  EncodeScratch scratch;
  for (size_t i = 0; i < j.size(); ++i) {
    JsonReader r(j[i], json_index("added_tokens", i), file);
    AddedToken t;
    t.content = r.string("content");
    const int64_t file_id = r.integer("id");
    t.special = r.boolean("special");
    t.lstrip = r.boolean("lstrip");
    t.rstrip = r.boolean("rstrip");
    t.single_word = r.boolean("single_word");
    t.normalized = r.boolean("normalized");
    r.finish();
    if (t.content.empty()) continue;  // HF skips them
    int64_t id;
    if (const auto known = v.by_content_.find(t.content); known != v.by_content_.end())
      id = v.tokens_[known->second].id;
    else if (const int32_t in_model = model.token_id(t.content); in_model >= 0)
      id = in_model;
    else
      id = next_id++;
    if (id != file_id)
      r.fail(str_cat("the token \"", t.content, "\" has id ", file_id,
                     " in the file, but HF tokenizers would give it id ", id));
    t.id = int32_t(id);
    t.pattern = t.content;
    if (t.normalized && !normalizer.empty()) normalizer.normalize(t.pattern, scratch);
    if (const auto known = v.by_id_.find(t.id); known != v.by_id_.end()) {
      v.tokens_[known->second] = t;  // HF: the later token with this id replaces the earlier
    } else {
      v.by_id_.emplace(t.id, v.tokens_.size());
      v.tokens_.push_back(t);
    }
    v.by_content_[t.content] = v.by_id_[t.id];
    v.id_end_ = std::max(v.id_end_, id + 1);
  }
  v.build(v.raw_, false, file);
  v.build(v.normalized_, true, file);
  return v;
}

void AddedVocabulary::build(Matcher& m, bool normalized, const std::string& file) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i].normalized == normalized && !tokens_[i].pattern.empty()) m.order.push_back(i);
  std::sort(m.order.begin(), m.order.end(),
            [&](size_t a, size_t b) { return tokens_[a].pattern < tokens_[b].pattern; });
  for (size_t k = 0; k + 1 < m.order.size(); ++k)
    TROUPE_CHECK(tokens_[m.order[k]].pattern != tokens_[m.order[k + 1]].pattern, file, ": added tokens ",
                 tokens_[m.order[k]].id, " and ", tokens_[m.order[k + 1]].id, " are both matched as \"",
                 tokens_[m.order[k]].pattern, "\" (HF cannot build its matcher either)");
  for (size_t i : m.order) m.first[static_cast<unsigned char>(tokens_[i].pattern[0])] = true;
}

std::optional<size_t> AddedVocabulary::longest_at(const Matcher& m, std::string_view text, size_t pos) const {
  // Binary search on the sorted patterns, one byte deeper per step: [lo, hi) share the first d
  // bytes of text[pos...]; the one that is exactly that long sorts first.
  std::optional<size_t> best;
  size_t lo = 0, hi = m.order.size();
  for (size_t d = 0; lo < hi; ++d) {
    if (tokens_[m.order[lo]].pattern.size() == d) best = m.order[lo++];
    if (pos + d >= text.size() || lo >= hi) break;
    const auto c = static_cast<unsigned char>(text[pos + d]);
    auto byte_at = [&](size_t k) { return static_cast<unsigned char>(tokens_[m.order[k]].pattern[d]); };
    size_t a = lo, b = hi;  // first with byte >= c
    while (a < b) {
      const size_t mid = (a + b) / 2;
      if (byte_at(mid) < c)
        a = mid + 1;
      else
        b = mid;
    }
    size_t e = a, f = hi;  // first with byte > c
    while (e < f) {
      const size_t mid = (e + f) / 2;
      if (byte_at(mid) <= c)
        e = mid + 1;
      else
        f = mid;
    }
    lo = a;
    hi = e;
  }
  return best;
}

// HF's AddedVocabulary::find_matches.
void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Section>& out) const {
  out.clear();
  const Matcher& m = normalized ? normalized_ : raw_;
  size_t start_offset = 0;
  for (size_t pos = 0; !m.order.empty() && pos < text.size();) {
    if (!m.first[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const std::optional<size_t> hit = longest_at(m, text, pos);
    if (!hit) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[*hit];
    size_t start = pos, stop = pos + t.pattern.size();
    pos = stop;  // the search goes on after the match, whether it is taken or not
    if (t.single_word) {
      char32_t before = 0, after = 0;
      if (start > 0) previous_code_point(text, start, before);
      if (stop < text.size()) next_code_point(text, stop, after);
      if ((start > 0 && is_word_char(before)) || (stop < text.size() && is_word_char(after))) continue;
    }
    if (t.lstrip) start = std::max(white_space_start(text, start), start_offset);  // HF: \s*$ before
    if (t.rstrip) stop = white_space_end(text, stop);
    if (start_offset < start) out.push_back({uint32_t(start_offset), uint32_t(start), -1});
    out.push_back({uint32_t(start), uint32_t(stop), t.id});
    start_offset = stop;
  }
  if (start_offset < text.size() || out.empty()) out.push_back({uint32_t(start_offset), uint32_t(text.size()), -1});
}

const AddedToken* AddedVocabulary::token(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

}  // namespace troupe::hf
