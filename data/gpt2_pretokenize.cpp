#include "data/gpt2_pretokenize.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>

#include <utf8proc.h>

#include "data/byte_unicode.hpp"

namespace troupe {
namespace {

// The four classes the regex distinguishes.
enum class CharClass : uint8_t { letter, number, space, other };

// Letters and digits new in Unicode 16.0, which HF tokenizers (0.23, Oniguruma) knows and
// utf8proc 2.8 (Unicode 15.0) calls unassigned: consulted only for unassigned code points, so
// a newer utf8proc makes it a no-op. From scripts/check_tokenizer_hf.py's code point sweep.
struct ClassRange {
  char32_t first, last;
  CharClass cls;
};
constexpr ClassRange kUnicode16Additions[] = {
    {0x1C89, 0x1C8A, CharClass::letter},   {0xA7CB, 0xA7CD, CharClass::letter},   {0xA7DA, 0xA7DC, CharClass::letter},
    {0x105C0, 0x105F3, CharClass::letter}, {0x10D40, 0x10D49, CharClass::number}, {0x10D4A, 0x10D65, CharClass::letter},
    {0x10D6F, 0x10D85, CharClass::letter}, {0x10EC2, 0x10EC4, CharClass::letter}, {0x11380, 0x11389, CharClass::letter},
    {0x1138B, 0x1138B, CharClass::letter}, {0x1138E, 0x1138E, CharClass::letter}, {0x11390, 0x113B5, CharClass::letter},
    {0x113B7, 0x113B7, CharClass::letter}, {0x113D1, 0x113D1, CharClass::letter}, {0x113D3, 0x113D3, CharClass::letter},
    {0x116D0, 0x116E3, CharClass::number}, {0x11BC0, 0x11BE0, CharClass::letter}, {0x11BF0, 0x11BF9, CharClass::number},
    {0x13460, 0x143FA, CharClass::letter}, {0x16100, 0x1611D, CharClass::letter}, {0x16130, 0x16139, CharClass::number},
    {0x16D40, 0x16D6C, CharClass::letter}, {0x16D70, 0x16D79, CharClass::number}, {0x18CFF, 0x18CFF, CharClass::letter},
    {0x1CCF0, 0x1CCF9, CharClass::number}, {0x1E5D0, 0x1E5ED, CharClass::letter}, {0x1E5F0, 0x1E5F0, CharClass::letter},
    {0x1E5F1, 0x1E5FA, CharClass::number}, {0x2EBF0, 0x2EE5D, CharClass::letter},
};

CharClass classify_unassigned(char32_t cp) {
  const auto* end = std::end(kUnicode16Additions);
  const auto* it = std::upper_bound(std::begin(kUnicode16Additions), end, cp,
                                    [](char32_t c, const ClassRange& r) { return c < r.first; });
  if (it != std::begin(kUnicode16Additions) && cp <= (it - 1)->last) return (it - 1)->cls;
  return CharClass::other;
}

CharClass classify_code_point(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return CharClass::space;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CharClass::letter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CharClass::number;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return CharClass::space;
    case UTF8PROC_CATEGORY_CN:
      return classify_unassigned(cp);
    default:
      return CharClass::other;
  }
}

// ASCII dominates real text: one table load instead of a utf8proc lookup.
const std::array<CharClass, 128>& ascii_classes() {
  static const std::array<CharClass, 128> table = [] {
    std::array<CharClass, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = classify_code_point(c);
    return t;
  }();
  return table;
}

struct CharInfo {
  CharClass cls;
  uint32_t len;  // bytes
};

inline CharInfo char_at(std::string_view s, size_t i, const std::array<CharClass, 128>& ascii) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {ascii[c], 1};
  char32_t cp;
  const int len = decode_utf8(s, i, cp);
  if (len == 0) return {CharClass::other, 1};
  return {classify_code_point(cp), uint32_t(len)};
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at s[i] == '\'', or 0.
inline size_t contraction_length(std::string_view s, size_t i) {
  if (i + 1 >= s.size()) return 0;
  const char c1 = s[i + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char c2 = s[i + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

}  // namespace

bool Gpt2Pretokenizer::next(std::string_view& piece) {
  const size_t n = text_.size();
  if (pos_ >= n) return false;
  const auto& ascii = ascii_classes();
  const size_t start = pos_;
  size_t end;

  if (text_[start] == '\'') {
    if (const size_t len = contraction_length(text_, start)) {
      pos_ = start + len;
      piece = text_.substr(start, len);
      return true;
    }
  }

  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
  CharInfo first = char_at(text_, start, ascii);
  size_t run = start;
  if (text_[start] == ' ' && start + 1 < n) {
    const CharInfo after = char_at(text_, start + 1, ascii);
    if (after.cls != CharClass::space) {
      first = after;
      run = start + 1;
    }
  }
  if (first.cls != CharClass::space) {
    end = run + first.len;
    while (end < n) {
      const CharInfo c = char_at(text_, end, ascii);
      if (c.cls != first.cls) break;
      end += c.len;
    }
  } else {
    // `\s+(?!\S)|\s+`: the whole run when it ends the text or is a single character,
    // otherwise all but its last character (which goes with what follows).
    size_t last = start;
    end = start + first.len;
    while (end < n) {
      const CharInfo c = char_at(text_, end, ascii);
      if (c.cls != CharClass::space) break;
      last = end;
      end += c.len;
    }
    if (end < n && last != start) end = last;
  }
  pos_ = end;
  piece = text_.substr(start, end - start);
  return true;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  Gpt2Pretokenizer it(text);
  std::string_view piece;
  while (it.next(piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace troupe
