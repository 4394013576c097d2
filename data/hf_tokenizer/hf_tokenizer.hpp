// A Hugging Face tokenizer.json tokenizer (Megatron's --tokenizer-type HuggingFaceTokenizer
// --tokenizer-model PATH), id for id the same as HF tokenizers' Tokenizer.from_file(...):
//   text -> ill-formed UTF-8 replaced by U+FFFD -> added tokens split out -> each stretch
//   normalized -> pre-tokenized into pieces -> BPE per piece (with a per-object word cache)
//   -> ids; encode_with_special_tokens_append adds the post-processor's tokens.
// decode() is HF's decode(ids, skip_special_tokens=False): the tokens' spellings through the
// decoder (byte-level decoding of an incomplete UTF-8 sequence gives U+FFFD, as in HF).
// eod() and bos() are tokenizer_config.json's eos_token and bos_token, as Megatron's
// HuggingFaceTokenizer has them. The components are in data/hf_tokenizer/*.hpp; anything in
// the files they do not implement is refused with troupe::Error naming it and the file.
//
//   HfTokenizer tok = HfTokenizer::from_path("assets/tokenizers/llama3");
//   tok.encode("Hello world")                     // {9906, 1917}
//   tok.encode("<|begin_of_text|>Hi")             // {128000, 13347}
//   tok.decode(std::vector<int32_t>{9906, 1917})  // "Hello world"
//   tok.eod() == 128001                           // "<|end_of_text|>"
//
// Thread safety as in tokenizer.hpp: one object per thread; clone() shares the parsed files.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "data/bpe_word_cache.hpp"
#include "data/tokenizer.hpp"

namespace troupe {

namespace hf {
struct Pipeline;
struct EncodeScratch;
}  // namespace hf

class HfTokenizer final : public Tokenizer {
 public:
  // PATH: a folder holding tokenizer.json and tokenizer_config.json, or the tokenizer.json file
  // (tokenizer_config.json beside it is read when present).
  static HfTokenizer from_path(const std::string& path);
  // The files' contents; config_json nullopt: no tokenizer_config.json (then there is no EOD
  // and construction fails). The names only name the files in errors.
  static HfTokenizer from_strings(std::string_view tokenizer_json, std::optional<std::string_view> config_json,
                                  const std::string& json_name = "tokenizer.json",
                                  const std::string& config_name = "tokenizer_config.json");
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer() override;

  void encode_append(std::string_view text, std::vector<int32_t>& ids) const override;
  void encode_with_special_tokens_append(std::string_view text, std::vector<int32_t>& ids) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  // By the added tokens' contents, then the vocabulary's spellings ("Ġworld", "▁Hello").
  std::optional<int32_t> token_id(std::string_view token) const override;
  // An added token marked special.
  bool is_special(int32_t id) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  // tokenizer_config.json's bos_token, when it names one.
  std::optional<int32_t> bos() const;
  std::unique_ptr<Tokenizer> clone() const override;

  // Pieces currently in the word cache.
  size_t cached_words() const { return cache_.size(); }

 private:
  explicit HfTokenizer(std::shared_ptr<const hf::Pipeline> pipeline);
  void encode_section(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const;
  void encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  std::shared_ptr<const hf::Pipeline> pipeline_;
  mutable BpeWordCache cache_;
  mutable std::unique_ptr<hf::EncodeScratch> scratch_;
};

}  // namespace troupe
