#include "data/chat/jinja_unicode.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>

#include "data/chat/jinja_error.hpp"

namespace troupe::jinja {
namespace {

std::string code_point_hex(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04X", static_cast<unsigned>(cp));
  return buf;
}

// Python's unconditional SpecialCasing entries that change the length of a string in upper(),
// title() or lower() (Unicode SpecialCasing.txt), plus the Greek capital sigma, whose lower()
// depends on its position (final sigma).
bool has_special_casing(char32_t cp) {
  if (cp == 0x00DF || cp == 0x0130 || cp == 0x0149 || cp == 0x01F0 || cp == 0x0390 || cp == 0x03A3 || cp == 0x03B0 ||
      cp == 0x0587)
    return true;
  if ((cp >= 0x1E96 && cp <= 0x1E9A) || (cp >= 0x1F50 && cp <= 0x1F56) || (cp >= 0x1F80 && cp <= 0x1FFC)) return true;
  return (cp >= 0xFB00 && cp <= 0xFB06) || (cp >= 0xFB13 && cp <= 0xFB17);
}

char32_t checked_case(char32_t cp, utf8proc_int32_t (*map)(utf8proc_int32_t)) {
  if (cp < 0x80) return static_cast<char32_t>(map(static_cast<utf8proc_int32_t>(cp)));
  if (has_special_casing(cp))
    throw JinjaError(str_cat("case mapping of U+", code_point_hex(cp),
                             " is not supported (Python maps it to several characters or by context)"));
  return static_cast<char32_t>(map(static_cast<utf8proc_int32_t>(cp)));
}

bool is_cased(char32_t cp) {
  const auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_isupper(c) || utf8proc_islower(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::u32string cps = utf8_decode(text);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = map(i, cps[i]);
  return utf8_encode(cps);
}

}  // namespace

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) throw JinjaError("invalid UTF-8 in a string");
    out.push_back(static_cast<char32_t>(cp));
    p += n;
    left -= n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  if (n <= 0) throw JinjaError("invalid code point in a string");
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string utf8_encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool python_isspace(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string python_strip(std::string_view text, const std::u32string* chars, bool left, bool right) {
  const std::u32string cps = utf8_decode(text);
  auto strip_it = [&](char32_t cp) { return chars ? chars->find(cp) != std::u32string::npos : python_isspace(cp); };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip_it(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip_it(cps[end - 1])) --end;
  return utf8_encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::string python_upper(std::string_view text) {
  return map_code_points(text, [](size_t, char32_t cp) { return checked_case(cp, utf8proc_toupper); });
}

std::string python_lower(std::string_view text) {
  return map_code_points(text, [](size_t, char32_t cp) { return checked_case(cp, utf8proc_tolower); });
}

std::string python_capitalize(std::string_view text) {
  return map_code_points(text, [](size_t i, char32_t cp) {
    return i == 0 ? checked_case(cp, utf8proc_totitle) : checked_case(cp, utf8proc_tolower);
  });
}

std::string python_title(std::string_view text) {
  bool previous_cased = false;
  return map_code_points(text, [&](size_t, char32_t cp) {
    const char32_t out = previous_cased ? checked_case(cp, utf8proc_tolower) : checked_case(cp, utf8proc_totitle);
    previous_cased = is_cased(cp);
    return out;
  });
}

std::string python_swapcase(std::string_view text) {
  return map_code_points(text, [](size_t, char32_t cp) {
    const auto c = static_cast<utf8proc_int32_t>(cp);
    if (utf8proc_isupper(c)) return checked_case(cp, utf8proc_tolower);
    if (utf8proc_islower(c)) return checked_case(cp, utf8proc_toupper);
    return cp;
  });
}

bool python_isupper(std::string_view text) {
  bool cased = false;
  for (char32_t cp : utf8_decode(text)) {
    const auto c = static_cast<utf8proc_int32_t>(cp);
    if (utf8proc_islower(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || utf8proc_isupper(c);
  }
  return cased;
}

bool python_islower(std::string_view text) {
  bool cased = false;
  for (char32_t cp : utf8_decode(text)) {
    const auto c = static_cast<utf8proc_int32_t>(cp);
    if (utf8proc_isupper(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || utf8proc_islower(c);
  }
  return cased;
}

bool python_isprintable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x7F) return cp > 0x20;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool python_isalpha(std::string_view text) {
  const std::u32string cps = utf8_decode(text);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), [](char32_t cp) {
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
  });
}

namespace {
bool is_digit_cp(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  if (cat == UTF8PROC_CATEGORY_NO) throw JinjaError("isdigit() of a non-decimal numeric character is not supported");
  return cat == UTF8PROC_CATEGORY_ND;
}
}  // namespace

bool python_isdigit(std::string_view text) {
  const std::u32string cps = utf8_decode(text);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), is_digit_cp);
}

bool python_isalnum(std::string_view text) {
  const std::u32string cps = utf8_decode(text);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), [](char32_t cp) {
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || is_digit_cp(cp);
  });
}

}  // namespace troupe::jinja
