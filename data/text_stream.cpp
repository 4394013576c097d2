#include "data/text_stream.hpp"

#include <algorithm>

namespace troupe {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// The length of the longest prefix of `s` that does not end inside a UTF-8 character.
size_t complete_utf8(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    return len > back ? s.size() - back : s.size();
  }
  return s.size();
}

}  // namespace

size_t settled_text_end(std::string_view text) {
  size_t end = complete_utf8(text);
  while (end >= kReplacement.size() && text.substr(end - kReplacement.size(), kReplacement.size()) == kReplacement)
    end -= kReplacement.size();
  return end;
}

}  // namespace troupe
