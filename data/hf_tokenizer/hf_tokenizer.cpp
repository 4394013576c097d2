#include "data/hf_tokenizer/hf_tokenizer.hpp"

#include "base/check.hpp"
#include "data/byte_unicode.hpp"
#include "data/hf_tokenizer/pipeline.hpp"
#include "data/hf_tokenizer/scratch.hpp"

namespace troupe {

HfTokenizer::HfTokenizer(std::shared_ptr<const hf::Pipeline> pipeline)
    : pipeline_(std::move(pipeline)), scratch_(std::make_unique<hf::EncodeScratch>()) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

HfTokenizer HfTokenizer::from_path(const std::string& path) {
  return HfTokenizer(std::make_shared<const hf::Pipeline>(hf::load_pipeline(path)));
}

HfTokenizer HfTokenizer::from_strings(std::string_view tokenizer_json, std::optional<std::string_view> config_json,
                                      const std::string& json_name, const std::string& config_name) {
  return HfTokenizer(
      std::make_shared<const hf::Pipeline>(hf::parse_pipeline(tokenizer_json, config_json, json_name, config_name)));
}

std::unique_ptr<Tokenizer> HfTokenizer::clone() const { return std::unique_ptr<Tokenizer>(new HfTokenizer(pipeline_)); }

int64_t HfTokenizer::vocab_size() const { return pipeline_->vocab_size; }
int32_t HfTokenizer::eod() const { return pipeline_->eos; }
std::optional<int32_t> HfTokenizer::bos() const { return pipeline_->bos; }

bool HfTokenizer::is_special(int32_t id) const {
  const hf::AddedToken* t = pipeline_->added.token(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> HfTokenizer::token_id(std::string_view token) const {
  if (const auto id = pipeline_->added.id_of(token)) return id;
  const int32_t id = pipeline_->model.token_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

void HfTokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
  hf::EncodeScratch& s = *scratch_;
  if (utf8_valid_prefix(text) != text.size()) {
    s.sanitized.clear();
    append_utf8_lossy(s.sanitized, text);
    text = s.sanitized;
  }
  // Added tokens with normalized: false are found in the raw text; the rest is encoded per
  // stretch between them.
  pipeline_->added.split(text, false, s.sections);
  for (const hf::Section& sec : s.sections) {
    if (sec.id >= 0)
      ids.push_back(sec.id);
    else if (sec.end > sec.begin)
      encode_section(text.substr(sec.begin, sec.end - sec.begin), sec.begin == 0, ids);
  }
}

void HfTokenizer::encode_with_special_tokens_append(std::string_view text, std::vector<int32_t>& ids) const {
  const hf::PostProcessor& post = pipeline_->post_processor;
  ids.insert(ids.end(), post.prefix().begin(), post.prefix().end());
  encode_append(text, ids);
  ids.insert(ids.end(), post.suffix().begin(), post.suffix().end());
}

void HfTokenizer::encode_section(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const {
  const hf::Pipeline& p = *pipeline_;
  hf::EncodeScratch& s = *scratch_;
  std::string_view text = raw;
  if (!p.normalizer.empty()) {
    s.normalized.assign(raw);
    p.normalizer.normalize(s.normalized, s);
    text = s.normalized;
  }
  if (text.empty()) return;
  if (!p.added.has_normalized()) return encode_pieces(text, at_origin, ids);
  // Then the added tokens with normalized: true, in the normalized text.
  p.added.split(text, true, s.subsections);
  for (const hf::Section& sec : s.subsections) {
    if (sec.id >= 0)
      ids.push_back(sec.id);
    else if (sec.end > sec.begin)
      encode_pieces(text.substr(sec.begin, sec.end - sec.begin), at_origin && sec.begin == 0, ids);
  }
}

void HfTokenizer::encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const {
  const hf::Pipeline& p = *pipeline_;
  if (p.pre_tokenizer.empty()) return encode_piece(text, ids);
  hf::EncodeScratch& s = *scratch_;
  p.pre_tokenizer.pre_tokenize(text, at_origin, s);
  for (const hf::TextSpan& span : s.spans) encode_piece(s.pieces_text.substr(span.begin, span.end - span.begin), ids);
}

void HfTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  const hf::Pipeline& p = *pipeline_;
  if (!p.cut_before_metaspace) return cache_.encode_word(p.model, piece, ids);
  // Cut before each "▁" that follows another character (see Pipeline::cut_before_metaspace).
  constexpr std::string_view kMeta = "\xE2\x96\x81";
  size_t begin = 0;
  for (size_t at = piece.find(kMeta, 1); at != std::string_view::npos; at = piece.find(kMeta, at + kMeta.size())) {
    if (piece.substr(0, at).ends_with(kMeta)) continue;
    cache_.encode_word(p.model, piece.substr(begin, at - begin), ids);
    begin = at;
  }
  cache_.encode_word(p.model, piece.substr(begin), ids);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  const hf::Pipeline& p = *pipeline_;
  // HF's decode: an added token's text (its normalized form when it has one), else the model's.
  auto spelling = [&](int32_t id) -> std::string_view {
    if (const hf::AddedToken* t = p.added.token(id)) return t->pattern;
    TROUPE_CHECK(p.model.has_id(id), "hf tokenizer: cannot decode id ", id, ": not in the vocabulary (size ",
                 p.vocab_size, ")");
    return p.model.token_spelling(id);
  };
  if (p.decoder.byte_level_only()) {
    std::string bytes;
    for (const int32_t id : ids) append_byte_level_token_bytes(bytes, spelling(id));
    return utf8_lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) tokens.emplace_back(spelling(id));
  return p.decoder.decode(std::move(tokens));
}

}  // namespace troupe
