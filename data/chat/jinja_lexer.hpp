// Splits a Jinja template into tokens the way Python Jinja's lexer does under the environment
// transformers renders chat templates with: trim_blocks (the newline after a block or comment
// tag is dropped), lstrip_blocks (spaces and tabs before a block or comment tag at the start of
// a line are dropped), `{%-`/`-%}` strip all whitespace on that side, `{%+`/`+%}` keep it,
// "\r\n" and "\r" become "\n", a single trailing newline of the template is dropped, and
// {% raw %}...{% endraw %} is text. Comments are skipped.
//
//   auto tokens = jinja_lex("{% if x %}\n  {{- y }}\n{% endif %}", "demo");
//   // block_begin, name "if", name "x", block_end, variable_begin, name "y", variable_end, text "\n", ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat/jinja_error.hpp"

namespace troupe::jinja {

enum class TokenKind : uint8_t {
  text,            // template data between tags
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,            // identifiers and keywords (if, in, not, true, ...)
  string,          // a string literal, unescaped
  integer,
  floating,
  op,  // + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  eof,
};

struct Token {
  TokenKind kind = TokenKind::eof;
  std::string value;  // text, name, operator or the string literal's value
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// Throws troupe::Error naming `template_name`, the line and column for what Jinja's lexer
// rejects (an unclosed tag or string, an unexpected character).
std::vector<Token> jinja_lex(std::string_view source, const std::string& template_name);

}  // namespace troupe::jinja
