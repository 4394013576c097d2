#include "data/null_tokenizer.hpp"

#include <charconv>
#include <climits>

#include "base/check.hpp"

namespace troupe {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

NullTokenizer::NullTokenizer(int64_t vocab_size) : eod_(0) {
  TROUPE_CHECK(vocab_size > 0 && vocab_size < INT32_MAX, "NullTokenizer: --vocab-size must be in [1, ", INT32_MAX - 1,
               "], got ", vocab_size);
  eod_ = int32_t(vocab_size);
}

void NullTokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
  size_t i = 0;
  while (true) {
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    if (i == text.size()) return;
    size_t end = i;
    while (end < text.size() && !is_ascii_space(text[end])) ++end;
    const std::string_view token = text.substr(i, end - i);
    // Python's int() accepts a leading '+'; from_chars does not.
    const size_t skip = token.size() > 1 && token[0] == '+' ? 1 : 0;
    int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(token.data() + skip, token.data() + token.size(), id);
    TROUPE_CHECK(ec != std::errc::invalid_argument && ptr == token.data() + token.size(), "NullTokenizer: \"", token,
                 "\" at byte ", i, " is not an integer id");
    TROUPE_CHECK(ec == std::errc() && id >= 0 && id < vocab_size(), "NullTokenizer: id ", token, " at byte ", i,
                 " is outside [0, ", vocab_size(), ")");
    ids.push_back(int32_t(id));
    i = end;
  }
}

std::string NullTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t k = 0; k < ids.size(); ++k) {
    TROUPE_CHECK(ids[k] >= 0 && ids[k] < vocab_size(), "NullTokenizer: cannot decode id ", ids[k], ": outside [0, ",
                 vocab_size(), ")");
    if (k > 0) text += ' ';
    text += std::to_string(ids[k]);
  }
  return text;
}

}  // namespace troupe
