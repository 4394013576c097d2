#include "data/gpt2_tokenizer.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/gpt2_pretokenize.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

std::string read_text_file(const std::string& path, const char* what) {
  TROUPE_CHECK(!path.empty(), "gpt2 tokenizer: no ", what, " given");
  std::ifstream in(path, std::ios::binary);
  if (!in) TROUPE_FAIL("gpt2 tokenizer: cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  TROUPE_CHECK(!in.bad(), "gpt2 tokenizer: cannot read ", what, " '", path, "'");
  return std::move(buf).str();
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const BpeModel> model, SpecialTokens special)
    : model_(std::move(model)), special_(special), eod_(model_->token_id(kEndOfText)) {}

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::string& vocab_file, const std::string& merge_file,
                                        SpecialTokens special) {
  const std::string vocab = read_text_file(vocab_file, "vocab file");
  const std::string merges = read_text_file(merge_file, "merge file");
  return from_strings(vocab, merges, special, vocab_file, merge_file);
}

Gpt2Tokenizer Gpt2Tokenizer::from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                          SpecialTokens special, const std::string& vocab_name,
                                          const std::string& merges_name) {
  auto model = std::make_shared<const BpeModel>(BpeModel::parse(vocab_json, merges_txt, vocab_name, merges_name));
  TROUPE_CHECK(model->token_id(kEndOfText) >= 0, "vocab file ", vocab_name, ": no \"", kEndOfText,
               "\" token (GPT-2's end-of-document id)");
  return Gpt2Tokenizer(std::move(model), special);
}

std::unique_ptr<Tokenizer> Gpt2Tokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new Gpt2Tokenizer(model_, special_));
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
  if (special_ == SpecialTokens::as_text) return encode_ordinary_append(text, ids);
  // HF splits on added tokens before pre-tokenizing: the text on each side is encoded alone.
  for (size_t at; (at = text.find(kEndOfText)) != std::string_view::npos;) {
    encode_ordinary_append(text.substr(0, at), ids);
    ids.push_back(eod_);
    text.remove_prefix(at + kEndOfText.size());
  }
  encode_ordinary_append(text, ids);
}

void Gpt2Tokenizer::encode_ordinary_append(std::string_view text, std::vector<int32_t>& ids) const {
  Gpt2Pretokenizer pieces(text);
  std::string_view piece;
  while (pieces.next(piece)) cache_.encode_word(*model_, piece, ids);
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  size_t bytes = 0;
  for (const int32_t id : ids) {
    TROUPE_CHECK(model_->has_id(id), "gpt2 tokenizer: cannot decode id ", id, ": not in the vocabulary (size ",
                 model_->vocab_size(), ")");
    bytes += model_->token_bytes(id).size();
  }
  std::string text;
  text.reserve(bytes);
  for (const int32_t id : ids) text.append(model_->token_bytes(id));
  return text;
}

std::optional<int32_t> Gpt2Tokenizer::token_id(std::string_view token) const {
  const int32_t id = model_->token_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace troupe
