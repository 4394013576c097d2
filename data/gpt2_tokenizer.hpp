// GPT-2's byte-level BPE tokenizer (Megatron's GPT2BPETokenizer), id for id the same as HF's
// GPT2TokenizerFast built from the same vocab.json and merges.txt:
//   text -> pieces (Gpt2Pretokenizer, the GPT-2 regex) -> bytes of each piece -> BPE merges
//   by rank (BpeModel) -> ids, with a per-object cache of piece -> ids.
// decode() concatenates the raw bytes of the ids: decode(encode(s)) == s for every byte
// string s, and a prefix of ids that ends inside a UTF-8 character decodes to its raw bytes
// (no U+FFFD replacement).
//
// "<|endoftext|>" in the text is the EOD id by default (SpecialTokens::recognize, HF's default);
// SpecialTokens::as_text encodes it as ordinary text, as Megatron's legacy GPT2BPETokenizer does.
// Either way the text on each side of it is encoded on its own.
//
//   Gpt2Tokenizer tok = Gpt2Tokenizer::from_files("assets/gpt2/gpt2-vocab.json",
//                                                 "assets/gpt2/gpt2-merges.txt");
//   tok.encode("Hello world");          // {15496, 995}
//   tok.encode(" Hello");               // {18435}
//   tok.encode("a<|endoftext|>b");      // {64, 50256, 65}
//   tok.decode(std::vector<int32_t>{15496, 995}) == "Hello world"
#pragma once

#include <memory>
#include <string>

#include "data/bpe_model.hpp"
#include "data/bpe_word_cache.hpp"
#include "data/tokenizer.hpp"

namespace troupe {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads vocab.json and merges.txt; throws troupe::Error naming the file (missing, malformed
  // JSON, a bad merge line with its number) and when the vocabulary has no "<|endoftext|>".
  static Gpt2Tokenizer from_files(const std::string& vocab_file, const std::string& merge_file,
                                  SpecialTokens special = SpecialTokens::recognize);
  // The same from the files' contents (`*_name` only names them in errors).
  static Gpt2Tokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                    SpecialTokens special = SpecialTokens::recognize,
                                    const std::string& vocab_name = "<vocab>",
                                    const std::string& merges_name = "<merges>");

  void encode_append(std::string_view text, std::vector<int32_t>& ids) const override;
  // Encodes as if "<|endoftext|>" were ordinary text, whatever special_tokens() says.
  void encode_ordinary_append(std::string_view text, std::vector<int32_t>& ids) const;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return model_->vocab_size(); }
  int32_t eod() const override { return eod_; }
  // By the vocabulary's byte-level spelling ("Ġworld", "<|endoftext|>").
  std::optional<int32_t> token_id(std::string_view token) const override;
  bool is_special(int32_t id) const override { return id == eod_; }
  std::unique_ptr<Tokenizer> clone() const override;

  SpecialTokens special_tokens() const { return special_; }
  const BpeModel& model() const { return *model_; }
  // Pieces currently in the word cache.
  size_t cached_words() const { return cache_.size(); }

  static constexpr std::string_view kEndOfText = "<|endoftext|>";

 private:
  Gpt2Tokenizer(std::shared_ptr<const BpeModel> model, SpecialTokens special);

  std::shared_ptr<const BpeModel> model_;
  SpecialTokens special_;
  int32_t eod_;
  mutable BpeWordCache cache_;
};

}  // namespace troupe
