#include "data/hf_tokenizer/decoder.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/byte_unicode.hpp"
#include "data/hf_tokenizer/json_reader.hpp"
#include "data/hf_tokenizer/unicode_props.hpp"

namespace troupe::hf {
namespace {

// HF's ByteFallback test: "<0xHH>" -> the byte (Rust's u8::from_str_radix also takes "+H").
std::optional<uint8_t> fallback_byte(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = digit(token[3]), lo = digit(token[4]);
  if (token[3] == '+' && lo >= 0) return uint8_t(lo);
  if (hi < 0 || lo < 0) return std::nullopt;
  return uint8_t(hi * 16 + lo);
}

// Appends the run of fallback bytes: the text when it is UTF-8, else one U+FFFD per byte.
void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (utf8_valid_prefix(bytes) == bytes.size()) {
    out.push_back(bytes);
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
  }
  bytes.clear();
}

}  // namespace

Decoder Decoder::parse(const nlohmann::json& j, const std::string& file) {
  Decoder d;
  if (!j.is_null()) {
    d.none_ = false;
    d.add(j, "decoder", file);
  }
  return d;
}

void Decoder::add(const nlohmann::json& j, const std::string& where, const std::string& file) {
  JsonReader r(j, where, file);
  const std::string& type = r.type();
  Step step{};
  if (type == "Sequence") {
    const nlohmann::json& list = r.list("decoders");
    r.finish();
    for (size_t i = 0; i < list.size(); ++i) add(list[i], json_index(where + ".decoders", i), file);
    return;
  }
  auto one_char = [&](const char* key) {
    step.text = r.string(key);
    if (step.text.empty() || next_code_point(step.text, 0, step.character) != int(step.text.size()))
      r.fail(str_cat("\"", key, "\" must be one character, got \"", step.text, "\""));
  };
  if (type == "ByteLevel") {
    step.kind = Kind::byte_level;
    for (const char* key : {"add_prefix_space", "trim_offsets", "use_regex"}) r.ignore(key);  // encoding only
  } else if (type == "Metaspace") {
    step.kind = Kind::metaspace;
    one_char("replacement");
    step.prepend = r.prepend_scheme() != "never";
    r.ignore("split");    // encoding only
    r.ignore("str_rep");  // HF ignores it too
  } else if (type == "Replace") {
    step.kind = Kind::replace;
    const JsonReader::Pattern pattern = r.pattern("pattern");
    step.pattern = Regex::of(pattern.regex, pattern.text, r.context());
    step.text = r.string("content");
  } else if (type == "ByteFallback") {
    step.kind = Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = Kind::fuse;
  } else if (type == "Strip") {
    step.kind = Kind::strip;
    one_char("content");
    step.start = r.integer("start");
    step.stop = r.integer("stop");
    if (step.start < 0 || step.stop < 0) r.fail("start and stop must not be negative");
  } else {
    r.fail(str_cat("the decoder type \"", type,
                   "\" is not implemented (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)"));
  }
  r.finish();
  steps_.push_back(std::move(step));
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const Step& step : steps_) run(step, tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

void Decoder::run(const Step& step, std::vector<std::string>& tokens) const {
  switch (step.kind) {
    case Kind::byte_level: {
      std::string bytes;
      for (const std::string& t : tokens) append_byte_level_token_bytes(bytes, t);
      tokens.assign(1, utf8_lossy(bytes));
      return;
    }
    case Kind::metaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string out;
        for (size_t k = 0; k < tokens[i].size();) {
          char32_t cp;
          const int len = next_code_point(tokens[i], k, cp);
          if (cp != step.character)
            out.append(tokens[i], k, size_t(len));
          else if (i != 0 || !step.prepend)
            out += ' ';
          k += size_t(len);
        }
        tokens[i] = std::move(out);
      }
      return;
    case Kind::replace: {
      RegexScratch scratch;
      std::vector<Regex::Match> matches;
      std::string buffer;
      for (std::string& t : tokens) step.pattern->replace_all(t, step.text, scratch, matches, buffer);
      return;
    }
    case Kind::byte_fallback: {
      std::vector<std::string> out;
      out.reserve(tokens.size());
      std::string bytes;
      for (std::string& t : tokens) {
        if (const auto b = fallback_byte(t)) {
          bytes += char(*b);
          continue;
        }
        flush_bytes(bytes, out);
        out.push_back(std::move(t));
      }
      flush_bytes(bytes, out);
      tokens = std::move(out);
      return;
    }
    case Kind::fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.clear();
      tokens.push_back(std::move(all));
      return;
    }
    case Kind::strip:
      // Up to `start` leading and `stop` trailing copies of the character go.
      for (std::string& t : tokens) {
        size_t begin = 0, end = t.size();
        char32_t cp;
        for (int64_t i = 0; i < step.start && begin < end; ++i) {
          const int len = next_code_point(t, begin, cp);
          if (cp != step.character) break;
          begin += size_t(len);
        }
        for (int64_t i = 0; i < step.stop && end > begin; ++i) {
          const int len = previous_code_point(t, end, cp);
          if (cp != step.character) break;
          end -= size_t(len);
        }
        t = t.substr(begin, end - begin);
      }
      return;
  }
}

}  // namespace troupe::hf
