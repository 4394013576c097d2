// Megatron's NullTokenizer: the text already is the ids, written as whitespace-separated
// decimal integers. Used with mock data and in tests, where no real vocabulary is wanted.
// As in Megatron, `--vocab-size V` leaves room for one extra id, the EOD:
// vocab_size() == V + 1 and eod() == V == vocab_size() - 1.
//
//   NullTokenizer tok(100);
//   tok.encode("3 14\n15");                      // {3, 14, 15}
//   tok.decode(std::vector<int32_t>{3, 14})     // "3 14"
//   tok.vocab_size() == 101, tok.eod() == 100
//   tok.encode("3 x") / tok.encode("101")       // throw troupe::Error
#pragma once

#include "data/tokenizer.hpp"

namespace troupe {

class NullTokenizer final : public Tokenizer {
 public:
  // `vocab_size` is Megatron's --vocab-size: the number of ids before the EOD.
  explicit NullTokenizer(int64_t vocab_size);

  // Megatron splits on single spaces; this accepts any run of ASCII whitespace. Throws on a
  // token that is not a decimal integer or is outside [0, vocab_size()).
  void encode_append(std::string_view text, std::vector<int32_t>& ids) const override;
  // The ids joined by single spaces.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return int64_t(eod_) + 1; }
  int32_t eod() const override { return eod_; }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t id) const override { return id == eod_; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<NullTokenizer>(*this); }

 private:
  int32_t eod_;
};

}  // namespace troupe
