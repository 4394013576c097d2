// The Python str semantics Jinja templates rely on, over UTF-8 text: code points (len, index,
// slice), str.isspace, and case mapping (upper/lower/title/capitalize/swapcase) through utf8proc.
// Python's full case mappings that change a character's length (ß -> SS, ﬁ -> FI) and the
// context-dependent final sigma are refused rather than approximated.
//
//   std::u32string cps = utf8_decode("héllo");   // 5 code points
//   utf8_encode(cps.substr(1, 3)) == "éll"
//   python_upper("héllo") == "HÉLLO"
#pragma once

#include <string>
#include <string_view>

namespace troupe::jinja {

// Throws JinjaError on invalid UTF-8 (the template's input is JSON text, so this means a bug or
// a corrupt file).
std::u32string utf8_decode(std::string_view text);
std::string utf8_encode(std::u32string_view cps);
void utf8_append(std::string& out, char32_t cp);
// Number of code points (Python's len()).
size_t utf8_length(std::string_view text);

// Python's str.isspace() for one code point (also what `\s` matches in Python's re module).
bool python_isspace(char32_t cp);
// Python's str.strip/lstrip/rstrip: without `chars`, Unicode whitespace; with it, any of its
// code points.
std::string python_strip(std::string_view text, const std::u32string* chars, bool left, bool right);

// Python's str.upper/lower/capitalize/title/swapcase. Throw JinjaError for characters whose
// Python mapping utf8proc's simple mapping does not reproduce (see the top of the file).
std::string python_upper(std::string_view text);
std::string python_lower(std::string_view text);
std::string python_capitalize(std::string_view text);
std::string python_title(std::string_view text);
std::string python_swapcase(std::string_view text);
// Python's str.isupper/islower: has a cased character and no cased character of the other case.
bool python_isupper(std::string_view text);
bool python_islower(std::string_view text);
// Whether Python's str.isprintable() holds for one code point (repr() escapes the others).
bool python_isprintable(char32_t cp);
// Python's str.isalpha / isalnum / isdigit over the whole string (false when empty). Digits:
// ASCII and Unicode decimal digits (category Nd); other numeric characters (superscripts) are
// refused.
bool python_isalpha(std::string_view text);
bool python_isdigit(std::string_view text);
bool python_isalnum(std::string_view text);

}  // namespace troupe::jinja
