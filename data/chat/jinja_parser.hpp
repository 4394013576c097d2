// Builds the syntax tree of a chat template from its tokens, as Python Jinja's parser does
// (same operator precedence: `~` binds tighter than `+`, `**` is left-associative, filters bind
// tighter than unary minus's operand, ...). Statements: if/elif/else, for (with else,
// `if` filter, tuple targets), set (expression, block, namespace attribute), macro, call, filter,
// with, break/continue (transformers enables jinja2.ext.loopcontrols), generation
// (transformers' AssistantTracker) and print. Refused by name with the line and column:
// block/extends/include/import/from/autoescape, recursive loops, *args/**kwargs in calls,
// unknown filters and tests, and filters/tests Jinja has but this renderer does not implement.
//
//   Program p = jinja_parse("{% for m in messages %}{{ m.content }}{% endfor %}", "demo");
#pragma once

#include <string>
#include <string_view>

#include "data/chat/jinja_ast.hpp"

namespace troupe::jinja {

// Throws troupe::Error "chat template 'NAME' line L, column C: ..." on a syntax error or an
// unsupported construct.
Program jinja_parse(std::string_view source, const std::string& template_name);

}  // namespace troupe::jinja
