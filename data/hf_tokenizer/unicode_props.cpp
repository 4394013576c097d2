#include "data/hf_tokenizer/unicode_props.hpp"

#include <utf8proc.h>

#include "data/byte_unicode.hpp"
#include "data/hf_tokenizer/onig_regex.hpp"

namespace troupe::hf {

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  // Alphabetic is not among utf8proc's properties; PCRE2 has it.
  static const Regex word =
      Regex::pcre2("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", "Unicode word class");
  thread_local RegexScratch scratch;
  std::string one;
  append_utf8(one, cp);
  return word.matches_at(one, 0, scratch);
}

void append_lowercase(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
  } else if (cp == 0x130) {
    out += "i\xCC\x87";
  } else {
    append_utf8(out, char32_t(utf8proc_tolower(utf8proc_int32_t(cp))));
  }
}

size_t white_space_end(std::string_view s, size_t begin) {
  char32_t cp;
  while (begin < s.size()) {
    const int len = next_code_point(s, begin, cp);
    if (!is_white_space(cp)) break;
    begin += size_t(len);
  }
  return begin;
}

size_t white_space_start(std::string_view s, size_t end) {
  char32_t cp;
  while (end > 0) {
    const int len = previous_code_point(s, end, cp);
    if (!is_white_space(cp)) break;
    end -= size_t(len);
  }
  return end;
}

int next_code_point(std::string_view s, size_t i, char32_t& cp) {
  const int len = decode_utf8(s, i, cp);
  return len > 0 ? len : 1;
}

int previous_code_point(std::string_view s, size_t i, char32_t& cp) {
  size_t start = i - 1;
  while (start > 0 && i - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const int len = next_code_point(s, start, cp);
  return int(i - start) == len ? len : (cp = static_cast<unsigned char>(s[i - 1]), 1);
}

}  // namespace troupe::hf
