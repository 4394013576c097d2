#include "data/hf_tokenizer/normalizer.hpp"

#include <utf8proc.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/byte_unicode.hpp"
#include "data/hf_tokenizer/json_reader.hpp"
#include "data/hf_tokenizer/unicode_props.hpp"

namespace troupe::hf {
namespace {

size_t first_non_ascii(std::string_view s, size_t from) {
  for (size_t i = from; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) return i;
  return s.size();
}

// Appends the normalization of `segment` (utf8proc: decompose, reorder, compose per options).
void normalize_segment(std::string_view segment, int options, std::vector<int32_t>& buffer, std::string& out) {
  const auto* str = reinterpret_cast<const utf8proc_uint8_t*>(segment.data());
  const auto opts = utf8proc_option_t(options);
  if (buffer.size() < segment.size() + 8) buffer.resize(segment.size() * 2 + 8);
  utf8proc_ssize_t n =
      utf8proc_decompose(str, utf8proc_ssize_t(segment.size()), buffer.data(), utf8proc_ssize_t(buffer.size()), opts);
  if (n > utf8proc_ssize_t(buffer.size())) {
    buffer.resize(size_t(n));
    n = utf8proc_decompose(str, utf8proc_ssize_t(segment.size()), buffer.data(), utf8proc_ssize_t(buffer.size()), opts);
  }
  TROUPE_CHECK(n >= 0, "utf8proc: ", utf8proc_errmsg(n));
  n = utf8proc_normalize_utf32(buffer.data(), n, opts);
  TROUPE_CHECK(n >= 0, "utf8proc: ", utf8proc_errmsg(n));
  for (utf8proc_ssize_t i = 0; i < n; ++i) append_utf8(out, char32_t(buffer[size_t(i)]));
}

// NFC/NFD/NFKC/NFKD. ASCII is unchanged by all four and no ASCII character combines with one
// before it, so only the runs of non-ASCII characters (with the ASCII character before each,
// which a combining mark may join) go through utf8proc.
void unicode_normalize(std::string& text, int options, EncodeScratch& s) {
  size_t i = first_non_ascii(text, 0);
  if (i == text.size()) return;
  std::string& out = s.normalize_buffer;
  out.clear();
  size_t done = 0;  // text[0, done) is in out
  while (i < text.size()) {
    const size_t begin = i > done ? i - 1 : i;
    size_t end = i;
    while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
    out.append(text, done, begin - done);
    normalize_segment(std::string_view(text).substr(begin, end - begin), options, s.code_points, out);
    done = end;
    i = first_non_ascii(text, end);
  }
  out.append(text, done, std::string::npos);
  text.swap(out);
}

void lowercase(std::string& text, EncodeScratch& s) {
  std::string& out = s.normalize_buffer;
  out.clear();
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const int len = next_code_point(text, i, cp);
    append_lowercase(out, cp);
    i += size_t(len);
  }
  text.swap(out);
}

void strip(std::string& text, bool left, bool right) {
  const size_t end = right ? white_space_start(text, text.size()) : text.size();
  const size_t begin = left ? std::min(white_space_end(text, 0), end) : 0;
  text.erase(end);
  text.erase(0, begin);
}

}  // namespace

Normalizer Normalizer::parse(const nlohmann::json& j, const std::string& file) {
  Normalizer n;
  if (!j.is_null()) n.add(j, "normalizer", file);
  return n;
}

void Normalizer::add(const nlohmann::json& j, const std::string& where, const std::string& file) {
  JsonReader r(j, where, file);
  const std::string& type = r.type();
  Step step{};
  if (type == "Sequence") {
    const nlohmann::json& list = r.list("normalizers");
    r.finish();
    for (size_t i = 0; i < list.size(); ++i) add(list[i], json_index(where + ".normalizers", i), file);
    return;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Kind::unicode;
    step.utf8proc_options = UTF8PROC_STABLE | (type.back() == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
                            (type.size() == 4 ? UTF8PROC_COMPAT : 0);
  } else if (type == "Lowercase") {
    step.kind = Kind::lowercase;
  } else if (type == "Prepend") {
    step.kind = Kind::prepend;
    step.content = r.string("prepend");
  } else if (type == "Replace") {
    step.kind = Kind::replace;
    const JsonReader::Pattern pattern = r.pattern("pattern");
    step.pattern = Regex::of(pattern.regex, pattern.text, r.context());
    step.content = r.string("content");
  } else if (type == "Strip") {
    step.kind = Kind::strip;
    step.left = r.boolean("strip_left");
    step.right = r.boolean("strip_right");
  } else {
    r.fail(str_cat("the normalizer type \"", type,
                   "\" is not implemented (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence)"));
  }
  r.finish();
  steps_.push_back(std::move(step));
}

void Normalizer::normalize(std::string& text, EncodeScratch& scratch) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::unicode:
        unicode_normalize(text, step.utf8proc_options, scratch);
        break;
      case Kind::lowercase:
        lowercase(text, scratch);
        break;
      case Kind::prepend:
        if (!text.empty()) text.insert(0, step.content);
        break;
      case Kind::replace:
        step.pattern->replace_all(text, step.content, scratch.regex, scratch.matches, scratch.normalize_buffer);
        break;
      case Kind::strip:
        strip(text, step.left, step.right);
        break;
    }
  }
}

}  // namespace troupe::hf
