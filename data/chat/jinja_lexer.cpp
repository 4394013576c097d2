#include "data/chat/jinja_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

// Jinja's lexer works on the text with every line break made "\n" and one final newline
// dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(normalize_newlines(source)), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root_step();
    push(TokenKind::eof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return SourcePos{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }
  [[noreturn]] void fail(size_t offset, const std::string& message) const { fail_at(name_, pos_of(offset), message); }
  Token& push(TokenKind kind, std::string value, size_t offset) {
    tokens_.push_back(Token{kind, std::move(value), 0, 0, pos_of(offset)});
    return tokens_.back();
  }
  char at(size_t i) const { return i < src_.size() ? src_[i] : '\0'; }
  bool starts_with(size_t i, std::string_view s) const { return src_.compare(i, s.size(), s) == 0; }

  // Length of the Python whitespace character at `i` (0 when it is not whitespace).
  size_t space_at(size_t i) const {
    const auto c = static_cast<unsigned char>(at(i));
    if (c < 0x80) return (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) ? 1 : 0;
    size_t n = 1;
    while (n < 4 && (static_cast<unsigned char>(at(i + n)) & 0xC0) == 0x80) ++n;
    const std::u32string cp = utf8_decode(std::string_view(src_).substr(i, n));
    return cp.size() == 1 && python_isspace(cp[0]) ? n : 0;
  }
  size_t skip_spaces(size_t i) const {
    for (size_t n; (n = space_at(i)) > 0;) i += n;
    return i;
  }

  void lex_root_step();
  std::string strip_before_tag(size_t begin, size_t end, char sign, bool is_variable) const;
  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) push(TokenKind::text, std::move(text), offset);
  }
  void lex_comment(size_t from);
  bool try_raw(size_t tag, size_t text_start);
  void lex_tag(bool is_block);
  bool match_tag_end(bool is_block);
  void lex_tag_token(std::vector<char>& balance);
  bool lex_number();
  bool lex_float(size_t start);
  size_t scan_digits(size_t i) const;
  void lex_string();
  void read_escape(char e, std::string& value);
  void read_hex_escape(size_t digits, std::string& value);
  void lex_operator(std::vector<char>& balance);

  const std::string src_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last thing consumed ended a line (or nothing was consumed)
};

// The text before a tag: all trailing whitespace goes with `{%-`; with lstrip_blocks, spaces
// before a block or comment tag that starts its line go too (not before `{{` or `{%+`).
std::string Lexer::strip_before_tag(size_t begin, size_t end, char sign, bool is_variable) const {
  std::string text = src_.substr(begin, end - begin);
  if (sign == '-') return python_strip(text, nullptr, false, true);
  if (sign == '+' || is_variable) return text;
  const size_t nl = text.rfind('\n');
  const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
  if (l_pos == 0 && !line_starting_) return text;
  if (l_pos == text.size()) return text;
  for (size_t i = l_pos; i < text.size();) {
    const size_t n = space_at(begin + i);
    if (n == 0) return text;
    i += n;
  }
  text.resize(l_pos);
  return text;
}

void Lexer::lex_root_step() {
  size_t tag = pos_;
  while ((tag = src_.find('{', tag)) != std::string::npos) {
    const char next = at(tag + 1);
    if (next == '{' || next == '%' || next == '#') break;
    ++tag;
  }
  if (tag == std::string::npos) {
    emit_text(src_.substr(pos_), pos_);
    pos_ = src_.size();
    return;
  }
  const size_t text_start = pos_;
  if (at(tag + 1) == '%' && try_raw(tag, text_start)) return;
  const char kind = at(tag + 1);
  const char sign = (at(tag + 2) == '-' || at(tag + 2) == '+') ? at(tag + 2) : '\0';
  emit_text(strip_before_tag(text_start, tag, sign, kind == '{'), text_start);
  line_starting_ = false;
  const size_t body = tag + 2 + (sign ? 1 : 0);
  if (kind == '#') {
    lex_comment(body);
    return;
  }
  push(kind == '%' ? TokenKind::block_begin : TokenKind::variable_begin, "", tag);
  pos_ = body;
  lex_tag(kind == '%');
}

void Lexer::lex_comment(size_t from) {
  const size_t close = src_.find("#}", from);
  if (close == std::string::npos) fail(from, "missing end of comment tag");
  const char sign = close > from ? src_[close - 1] : '\0';
  size_t end = close + 2;
  if (sign == '-')
    end = skip_spaces(end);
  else if (sign != '+' && at(end) == '\n')
    ++end;
  line_starting_ = src_[end - 1] == '\n';
  pos_ = end;
}

// {% raw %}...{% endraw %}: the body is text, whitespace control applies on both tags.
bool Lexer::try_raw(size_t tag, size_t text_start) {
  size_t i = tag + 2;
  const char sign = (at(i) == '-' || at(i) == '+') ? at(i) : '\0';
  i = skip_spaces(i + (sign ? 1 : 0));
  if (!starts_with(i, "raw")) return false;
  i = skip_spaces(i + 3);
  if (starts_with(i, "-%}")) {
    i = skip_spaces(i + 3);
  } else if (starts_with(i, "%}")) {
    i += 2;
  } else {
    return false;
  }
  emit_text(strip_before_tag(text_start, tag, sign, false), text_start);
  line_starting_ = src_[i - 1] == '\n';
  for (size_t open = src_.find("{%", i); open != std::string::npos; open = src_.find("{%", open + 1)) {
    size_t j = open + 2;
    const char end_sign = (at(j) == '-' || at(j) == '+') ? at(j) : '\0';
    j = skip_spaces(j + (end_sign ? 1 : 0));
    if (!starts_with(j, "endraw")) continue;
    j = skip_spaces(j + 6);
    if (starts_with(j, "+%}")) {
      j += 3;
    } else if (starts_with(j, "-%}")) {
      j = skip_spaces(j + 3);
    } else if (starts_with(j, "%}")) {
      j += 2 + (at(j + 2) == '\n' ? 1 : 0);
    } else {
      continue;
    }
    emit_text(strip_before_tag(i, open, end_sign, false), i);
    line_starting_ = src_[j - 1] == '\n';
    pos_ = j;
    return true;
  }
  fail(tag, "missing end of raw directive");
}

bool Lexer::match_tag_end(bool is_block) {
  size_t end = 0;
  if (is_block) {
    if (starts_with(pos_, "+%}"))
      end = pos_ + 3;
    else if (starts_with(pos_, "-%}"))
      end = skip_spaces(pos_ + 3);
    else if (starts_with(pos_, "%}"))
      end = pos_ + 2 + (at(pos_ + 2) == '\n' ? 1 : 0);
  } else {
    if (starts_with(pos_, "-}}"))
      end = skip_spaces(pos_ + 3);
    else if (starts_with(pos_, "}}"))
      end = pos_ + 2;
  }
  if (end == 0) return false;
  push(is_block ? TokenKind::block_end : TokenKind::variable_end, "", pos_);
  line_starting_ = src_[end - 1] == '\n';
  pos_ = end;
  return true;
}

void Lexer::lex_tag(bool is_block) {
  std::vector<char> balance;  // closing brackets expected; tag ends only when it is empty
  const size_t start = pos_;
  while (true) {
    if (pos_ >= src_.size())
      fail(start, is_block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
    if (balance.empty() && match_tag_end(is_block)) return;
    const size_t spaces = skip_spaces(pos_);
    if (spaces != pos_) {
      pos_ = spaces;
      continue;
    }
    lex_tag_token(balance);
  }
}

void Lexer::lex_tag_token(std::vector<char>& balance) {
  const char c = src_[pos_];
  if (is_digit(c)) {
    lex_number();
  } else if (is_name_start(c)) {
    const size_t start = pos_;
    while (is_name_char(at(pos_))) ++pos_;
    push(TokenKind::name, src_.substr(start, pos_ - start), start);
  } else if (c == '\'' || c == '"') {
    lex_string();
  } else if (static_cast<unsigned char>(c) >= 0x80) {
    fail(pos_, "non-ASCII character outside a string (identifiers must be ASCII)");
  } else {
    lex_operator(balance);
  }
}

// (\d+_)*\d+ from i; returns the end.
size_t Lexer::scan_digits(size_t i) const {
  while (is_digit(at(i))) {
    ++i;
    if (at(i) == '_' && is_digit(at(i + 1))) ++i;
  }
  return i;
}

bool Lexer::lex_float(size_t start) {
  if (start > 0 && src_[start - 1] == '.') return false;
  size_t end = scan_digits(start);
  bool is_float = false;
  if (at(end) == '.' && is_digit(at(end + 1))) {
    end = scan_digits(end + 1);
    is_float = true;
  }
  if (at(end) == 'e' || at(end) == 'E') {
    size_t exp = end + 1;
    if (at(exp) == '+' || at(exp) == '-') ++exp;
    if (is_digit(at(exp))) {
      end = scan_digits(exp);
      is_float = true;
    }
  }
  if (!is_float) return false;
  std::string digits;
  for (size_t i = start; i < end; ++i)
    if (src_[i] != '_') digits += src_[i];
  push(TokenKind::floating, src_.substr(start, end - start), start).float_value = std::strtod(digits.c_str(), nullptr);
  pos_ = end;
  return true;
}

bool Lexer::lex_number() {
  const size_t start = pos_;
  if (lex_float(start)) return true;
  int base = 10;
  size_t i = start;
  const char prefix = static_cast<char>(at(start + 1) | 0x20);
  if (src_[start] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
    base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : 16);
    i += 2;
  }
  std::string digits;
  auto valid = [&](char c) {
    if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
    return c >= '0' && c < static_cast<char>('0' + std::min(base, 10));
  };
  if (base == 10 && src_[start] == '0') {  // 0(_?0)*
    ++i;
    while (at(i) == '0' || (at(i) == '_' && at(i + 1) == '0')) ++i;
    digits = "0";
  } else {
    while (valid(at(i)) || (at(i) == '_' && valid(at(i + 1)) && !digits.empty())) {
      if (src_[i] != '_') digits += src_[i];
      ++i;
    }
  }
  if (digits.empty()) fail(start, "invalid integer literal");
  errno = 0;
  const long long value = std::strtoll(digits.c_str(), nullptr, base);
  if (errno == ERANGE) fail(start, "integer literal beyond the 64-bit range");
  push(TokenKind::integer, src_.substr(start, i - start), start).int_value = value;
  pos_ = i;
  return true;
}

void Lexer::lex_operator(std::vector<char>& balance) {
  static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  const size_t start = pos_;
  for (const char* op : kTwo) {
    if (starts_with(pos_, op)) {
      push(TokenKind::op, op, start);
      pos_ += 2;
      return;
    }
  }
  const char c = src_[pos_];
  if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
    fail(pos_, str_cat("unexpected character '", c, "'"));
  if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
  if (c == ')' || c == ']' || c == '}') {
    if (balance.empty()) fail(pos_, str_cat("unexpected '", c, "'"));
    if (balance.back() != c) fail(pos_, str_cat("unexpected '", c, "', expected '", balance.back(), "'"));
    balance.pop_back();
  }
  push(TokenKind::op, std::string(1, c), start);
  ++pos_;
}

// \xXX, \uXXXX or \UXXXXXXXX after the backslash and letter at pos_.
void Lexer::read_hex_escape(size_t digits, std::string& value) {
  char32_t cp = 0;
  for (size_t k = 0; k < digits; ++k) {
    const int h = hex_value(at(pos_));
    if (h < 0)
      fail(pos_, str_cat("truncated \\", digits == 2 ? "xXX" : (digits == 4 ? "uXXXX" : "UXXXXXXXX"),
                         " escape in a string literal"));
    cp = cp * 16 + static_cast<char32_t>(h);
    ++pos_;
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(pos_, "invalid code point escape in a string literal");
  utf8_append(value, cp);
}

// One escape of Python's `unicode-escape` codec; `e` is the character after the backslash.
void Lexer::read_escape(char e, std::string& value) {
  static const std::pair<char, char> kSimple[] = {{'\\', '\\'}, {'\'', '\''}, {'"', '"'},  {'a', '\a'}, {'b', '\b'},
                                                  {'f', '\f'},  {'n', '\n'},  {'r', '\r'}, {'t', '\t'}, {'v', '\v'}};
  for (const auto& [letter, ch] : kSimple) {
    if (e == letter) {
      value += ch;
      return;
    }
  }
  if (e == '\n') return;  // a backslash-newline continues the line
  if (e == 'x' || e == 'u' || e == 'U') return read_hex_escape(e == 'x' ? 2 : (e == 'u' ? 4 : 8), value);
  if (e == 'N') fail(pos_ - 2, "\\N{...} escapes are not supported");
  if (e >= '0' && e <= '7') {
    char32_t cp = static_cast<char32_t>(e - '0');
    for (int k = 0; k < 2 && at(pos_) >= '0' && at(pos_) <= '7'; ++k)
      cp = cp * 8 + static_cast<char32_t>(src_[pos_++] - '0');
    return utf8_append(value, cp);
  }
  if (static_cast<unsigned char>(e) >= 0x80)
    fail(pos_ - 2, "a backslash before a non-ASCII character is not supported");
  value += '\\';  // Python keeps an unknown escape as it is
  value += e;
}

// A string literal, decoded as Jinja does: Python's `unicode-escape` of the body.
void Lexer::lex_string() {
  const size_t start = pos_;
  const char quote = src_[pos_++];
  std::string value;
  while (true) {
    if (pos_ >= src_.size()) fail(start, "unterminated string literal");
    const char c = src_[pos_++];
    if (c == quote) break;
    if (c == '\\')
      read_escape(at(pos_++), value);
    else
      value += c;
  }
  push(TokenKind::string, std::move(value), start);
}

}  // namespace

std::vector<Token> jinja_lex(std::string_view source, const std::string& template_name) {
  return Lexer(source, template_name).run();
}

}  // namespace troupe::jinja
