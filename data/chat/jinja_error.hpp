// Errors of the chat-template renderer. Values, filters and methods throw JinjaError with a
// bare message ("unsupported operand types for +: 'int' and 'str'"); the interpreter adds the
// template name, line and column of the expression it was evaluating and rethrows a
// troupe::Error, so every failure a caller sees names its place in the template:
//
//   chat template 'qwen3' line 12, column 9: unknown filter 'frobnicate'
#pragma once

#include <string>

#include "base/check.hpp"

namespace troupe::jinja {

// 1-based line and column (in bytes) of a token in the template source.
struct SourcePos {
  int line = 1;
  int column = 1;
};

// A failure not yet tied to a template position.
class JinjaError : public troupe::Error {
 public:
  using troupe::Error::Error;
};

// The template's own raise_exception(message): its message as the template wrote it, so a
// server can show it to the client (the template rejects the conversation, not the renderer).
class TemplateRaised : public troupe::Error {
 public:
  using troupe::Error::Error;
};

// "chat template 'NAME' line L, column C: MESSAGE" as a troupe::Error.
[[noreturn]] void fail_at(const std::string& template_name, SourcePos pos, const std::string& message);

}  // namespace troupe::jinja
