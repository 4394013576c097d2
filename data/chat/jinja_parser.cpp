#include "data/chat/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "data/chat/jinja_filters.hpp"
#include "data/chat/jinja_lexer.hpp"
#include "data/chat/jinja_tests.hpp"

namespace troupe::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::text:
      return "template data";
    case TokenKind::variable_begin:
      return "'{{'";
    case TokenKind::variable_end:
      return "'}}'";
    case TokenKind::block_begin:
      return "'{%'";
    case TokenKind::block_end:
      return "'%}'";
    case TokenKind::eof:
      return "end of template";
    case TokenKind::string:
      return "string literal";
    default:
      return "'" + t.value + "'";
  }
}

template <typename T>
ExprPtr make_expr(SourcePos pos, T node) {
  auto e = std::make_unique<Expr>();
  e->pos = pos;
  e->node = std::move(node);
  return e;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_template() { return subparse({}); }

 private:
  // --- token stream ---
  const Token& cur() const { return tokens_[idx_]; }
  const Token& look() const { return tokens_[std::min(idx_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[idx_];
    if (idx_ + 1 < tokens_.size()) ++idx_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::op && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::name && cur().value == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(name_, cur().pos, message); }
  [[noreturn]] void fail_at_token(const Token& t, const std::string& message) const { fail_at(name_, t.pos, message); }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(str_cat("expected '", op, "', got ", describe(cur())));
  }
  void expect_name(std::string_view n) {
    if (!skip_name(n)) fail(str_cat("expected '", n, "', got ", describe(cur())));
  }
  std::string expect_identifier() {
    if (cur().kind != TokenKind::name) fail(str_cat("expected a name, got ", describe(cur())));
    return next().value;
  }
  void expect_kind(TokenKind kind) {
    if (cur().kind != kind) {
      Token t;
      t.kind = kind;
      fail(str_cat("expected ", describe(t), ", got ", describe(cur())));
    }
    next();
  }

  // --- statements ---
  Body subparse(std::initializer_list<std::string_view> end_tokens);
  Body parse_statements(std::initializer_list<std::string_view> end_tokens, bool drop_needle);
  void parse_statement(Body& body);
  Stmt parse_for(SourcePos pos);
  Stmt parse_if(SourcePos pos);
  Stmt parse_set(SourcePos pos);
  Stmt parse_with(SourcePos pos);
  Stmt parse_macro(SourcePos pos);
  Stmt parse_call_block(SourcePos pos);
  Stmt parse_filter_block(SourcePos pos);
  void parse_signature(MacroDef& macro);
  Target parse_assign_target(bool name_only, bool with_namespace, std::string_view extra_end);

  // --- expressions ---
  bool is_tuple_end(std::string_view extra_end) const;
  ExprPtr parse_tuple(bool with_condexpr, std::string_view extra_end, bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list_or_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  ArgsExpr parse_call_args();
  std::string parse_dotted_name();

  std::vector<Token> tokens_;
  size_t idx_ = 0;
  const std::string& name_;
  int loop_depth_ = 0;                  // for {% break %} / {% continue %}
  std::vector<MacroDef*> open_macros_;  // innermost last: notes `varargs` / `kwargs` uses
};

Body Parser::subparse(std::initializer_list<std::string_view> end_tokens) {
  Body body;
  while (cur().kind != TokenKind::eof) {
    const Token& t = cur();
    if (t.kind == TokenKind::text) {
      body.push_back(Stmt{t.pos, TextStmt{t.value}});
      next();
    } else if (t.kind == TokenKind::variable_begin) {
      const SourcePos pos = t.pos;
      next();
      body.push_back(Stmt{pos, OutputStmt{parse_tuple(true, "", false)}});
      expect_kind(TokenKind::variable_end);
    } else if (t.kind == TokenKind::block_begin) {
      next();
      if (cur().kind == TokenKind::name &&
          std::find(end_tokens.begin(), end_tokens.end(), cur().value) != end_tokens.end())
        return body;
      parse_statement(body);
      expect_kind(TokenKind::block_end);
    } else {
      fail(str_cat("unexpected ", describe(t)));
    }
  }
  if (end_tokens.size() > 0) {
    std::string expected;
    for (std::string_view e : end_tokens) expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
    fail(str_cat("unexpected end of template, expected ", expected));
  }
  return body;
}

Body Parser::parse_statements(std::initializer_list<std::string_view> end_tokens, bool drop_needle) {
  skip_op(":");
  expect_kind(TokenKind::block_end);
  Body body = subparse(end_tokens);
  if (drop_needle) next();
  return body;
}

void Parser::parse_statement(Body& body) {
  if (cur().kind != TokenKind::name) fail("tag name expected");
  const Token& tag = cur();
  const std::string& n = tag.value;
  const SourcePos pos = tag.pos;
  if (n == "for") return body.push_back(parse_for(pos));
  if (n == "if") return body.push_back(parse_if(pos));
  if (n == "set") return body.push_back(parse_set(pos));
  if (n == "with") return body.push_back(parse_with(pos));
  if (n == "macro") return body.push_back(parse_macro(pos));
  if (n == "call") return body.push_back(parse_call_block(pos));
  if (n == "filter") return body.push_back(parse_filter_block(pos));
  if (n == "break" || n == "continue") {
    if (loop_depth_ == 0) fail(str_cat("'", n, "' outside of a loop"));
    next();
    return body.push_back(Stmt{pos, LoopControlStmt{n == "break"}});
  }
  if (n == "generation") {  // transformers' AssistantTracker: renders its body (as a call block)
    next();
    const int saved_depth = std::exchange(loop_depth_, 0);
    ScopeStmt scope{parse_statements({"endgeneration"}, true)};
    loop_depth_ = saved_depth;
    return body.push_back(Stmt{pos, std::move(scope)});
  }
  if (n == "print") {
    next();
    for (bool first = true; cur().kind != TokenKind::block_end; first = false) {
      if (!first) expect_op(",");
      const SourcePos p = cur().pos;
      body.push_back(Stmt{p, OutputStmt{parse_expression()}});
    }
    return;
  }
  static const char* const kUnsupported[] = {"block", "extends", "include", "import", "from", "autoescape"};
  for (const char* u : kUnsupported)
    if (n == u) fail(str_cat("'", n, "' statements are not supported in chat templates"));
  fail(str_cat("unknown statement '", n, "'"));
}

Stmt Parser::parse_for(SourcePos pos) {
  expect_name("for");
  ForStmt f;
  f.target = parse_assign_target(false, false, "in");
  expect_name("in");
  f.iterable = parse_tuple(false, "recursive", false);
  if (skip_name("if")) f.condition = parse_expression();
  if (is_name("recursive")) fail("recursive for loops are not supported");
  ++loop_depth_;
  f.body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().value == "else") f.otherwise = parse_statements({"endfor"}, true);
  return Stmt{pos, std::move(f)};
}

Stmt Parser::parse_if(SourcePos pos) {
  expect_name("if");
  IfStmt s;
  while (true) {
    ExprPtr test = parse_tuple(false, "", false);
    Body body = parse_statements({"elif", "else", "endif"}, false);
    s.branches.emplace_back(std::move(test), std::move(body));
    const std::string tag = next().value;
    if (tag == "elif") continue;
    if (tag == "else") s.otherwise = parse_statements({"endif"}, true);
    break;
  }
  return Stmt{pos, std::move(s)};
}

Stmt Parser::parse_set(SourcePos pos) {
  expect_name("set");
  Target target = parse_assign_target(false, true, "");
  if (skip_op("=")) return Stmt{pos, SetStmt{std::move(target), parse_tuple(true, "", false)}};
  SetBlockStmt s;
  s.target = std::move(target);
  if (is_op("|")) s.filter = parse_filter(nullptr, false);
  s.body = parse_statements({"endset"}, true);
  return Stmt{pos, std::move(s)};
}

Stmt Parser::parse_with(SourcePos pos) {
  expect_name("with");
  WithStmt w;
  while (cur().kind != TokenKind::block_end) {
    if (!w.assignments.empty()) expect_op(",");
    Target t = parse_assign_target(false, false, "");
    expect_op("=");
    w.assignments.emplace_back(std::move(t), parse_expression());
  }
  w.body = parse_statements({"endwith"}, true);
  return Stmt{pos, std::move(w)};
}

Stmt Parser::parse_macro(SourcePos pos) {
  expect_name("macro");
  auto macro = std::make_shared<MacroDef>();
  macro->name = expect_identifier();
  parse_signature(*macro);
  const int saved_depth = std::exchange(loop_depth_, 0);
  open_macros_.push_back(macro.get());
  macro->body = parse_statements({"endmacro"}, true);
  open_macros_.pop_back();
  loop_depth_ = saved_depth;
  return Stmt{pos, MacroStmt{std::move(macro)}};
}

void Parser::parse_signature(MacroDef& macro) {
  expect_op("(");
  while (!is_op(")")) {
    if (!macro.params.empty()) expect_op(",");
    macro.params.push_back(expect_identifier());
    if (skip_op("="))
      macro.defaults.push_back(parse_expression());
    else if (!macro.defaults.empty())
      fail("non-default argument follows default argument");
  }
  expect_op(")");
}

Stmt Parser::parse_call_block(SourcePos pos) {
  expect_name("call");
  auto caller = std::make_shared<MacroDef>();
  caller->name = "caller";
  if (is_op("(")) parse_signature(*caller);
  const Token& call_token = cur();
  ExprPtr call = parse_expression();
  if (!std::holds_alternative<CallExpr>(call->node)) fail_at_token(call_token, "expected a call after 'call'");
  const int saved_depth = std::exchange(loop_depth_, 0);
  open_macros_.push_back(caller.get());
  caller->body = parse_statements({"endcall"}, true);
  open_macros_.pop_back();
  loop_depth_ = saved_depth;
  return Stmt{pos, CallBlockStmt{std::move(caller), std::move(call)}};
}

Stmt Parser::parse_filter_block(SourcePos pos) {
  expect_name("filter");
  FilterBlockStmt f;
  f.filter = parse_filter(nullptr, true);
  f.body = parse_statements({"endfilter"}, true);
  return Stmt{pos, std::move(f)};
}

Target Parser::parse_assign_target(bool name_only, bool with_namespace, std::string_view extra_end) {
  static const char* const kConstants[] = {"true", "false", "none", "True", "False", "None"};
  Target t;
  while (true) {
    if (!t.names.empty()) {
      if (!skip_op(",")) break;
      t.unpack = true;
      if (is_tuple_end(extra_end) || is_op("=")) break;
    }
    const Token& tok = cur();
    if (tok.kind != TokenKind::name) fail(str_cat("can't assign to ", describe(tok)));
    for (const char* c : kConstants)
      if (tok.value == c) fail(str_cat("can't assign to '", tok.value, "'"));
    t.names.push_back(next().value);
    if (with_namespace && is_op(".")) {
      next();
      t.ns_attr = expect_identifier();
      if (t.unpack) fail("assigning to a namespace attribute inside a tuple is not supported");
      break;
    }
    if (name_only) break;
  }
  if (t.unpack && !t.ns_attr.empty()) fail("assigning to a namespace attribute inside a tuple is not supported");
  return t;
}

// --- expressions ---

bool Parser::is_tuple_end(std::string_view extra_end) const {
  const Token& t = cur();
  if (t.kind == TokenKind::variable_end || t.kind == TokenKind::block_end || t.kind == TokenKind::eof) return true;
  if (t.kind == TokenKind::op && t.value == ")") return true;
  return !extra_end.empty() && t.kind == TokenKind::name && t.value == extra_end;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::string_view extra_end, bool explicit_parentheses) {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) fail(str_cat("expected an expression, got ", describe(cur())));
  }
  return make_expr(pos, ListExpr{std::move(items), true});
}

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
  const SourcePos pos = cur().pos;
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    expr = make_expr(pos, CondExpr{std::move(test), std::move(expr), std::move(otherwise)});
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  const SourcePos pos = cur().pos;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = make_expr(pos, BinaryExpr{BinaryOp::or_, std::move(left), parse_and()});
  return left;
}

ExprPtr Parser::parse_and() {
  const SourcePos pos = cur().pos;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = make_expr(pos, BinaryExpr{BinaryOp::and_, std::move(left), parse_not()});
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const SourcePos pos = next().pos;
    return make_expr(pos, UnaryExpr{UnaryOp::not_, parse_not()});
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const SourcePos pos = cur().pos;
  ExprPtr first = parse_math1();
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
  static const std::pair<const char*, CompareOp> kOps[] = {{"==", CompareOp::eq}, {"!=", CompareOp::ne},
                                                           {"<", CompareOp::lt},  {"<=", CompareOp::le},
                                                           {">", CompareOp::gt},  {">=", CompareOp::ge}};
  while (true) {
    bool matched = false;
    for (const auto& [text, op] : kOps) {
      if (is_op(text)) {
        next();
        rest.emplace_back(op, parse_math1());
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (skip_name("in")) {
      rest.emplace_back(CompareOp::in, parse_math1());
    } else if (is_name("not") && look().kind == TokenKind::name && look().value == "in") {
      next();
      next();
      rest.emplace_back(CompareOp::not_in, parse_math1());
    } else {
      break;
    }
  }
  if (rest.empty()) return first;
  return make_expr(pos, CompareExpr{std::move(first), std::move(rest)});
}

ExprPtr Parser::parse_math1() {
  const SourcePos pos = cur().pos;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const BinaryOp op = next().value == "+" ? BinaryOp::add : BinaryOp::sub;
    left = make_expr(pos, BinaryExpr{op, std::move(left), parse_concat()});
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> parts;
  parts.push_back(parse_math2());
  while (skip_op("~")) parts.push_back(parse_math2());
  if (parts.size() == 1) return std::move(parts[0]);
  return make_expr(pos, ConcatExpr{std::move(parts)});
}

ExprPtr Parser::parse_math2() {
  const SourcePos pos = cur().pos;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string& t = next().value;
    const BinaryOp op =
        t == "*" ? BinaryOp::mul : (t == "/" ? BinaryOp::div : (t == "//" ? BinaryOp::floordiv : BinaryOp::mod));
    left = make_expr(pos, BinaryExpr{op, std::move(left), parse_pow()});
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  const SourcePos pos = cur().pos;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) left = make_expr(pos, BinaryExpr{BinaryOp::pow, std::move(left), parse_unary(true)});
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const SourcePos pos = cur().pos;
  ExprPtr node;
  if (skip_op("-"))
    node = make_expr(pos, UnaryExpr{UnaryOp::neg, parse_unary(false)});
  else if (skip_op("+"))
    node = make_expr(pos, UnaryExpr{UnaryOp::pos, parse_unary(false)});
  else
    node = parse_primary();
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const SourcePos pos = t.pos;
  if (t.kind == TokenKind::name) {
    const std::string n = next().value;
    if (n == "true" || n == "True") return make_expr(pos, LiteralExpr{Value::boolean(true)});
    if (n == "false" || n == "False") return make_expr(pos, LiteralExpr{Value::boolean(false)});
    if (n == "none" || n == "None") return make_expr(pos, LiteralExpr{Value::none()});
    if (n == "varargs" && !open_macros_.empty()) open_macros_.back()->catch_varargs = true;
    if (n == "kwargs" && !open_macros_.empty()) open_macros_.back()->catch_kwargs = true;
    return make_expr(pos, NameExpr{n});
  }
  if (t.kind == TokenKind::string) {
    std::string text;
    while (cur().kind == TokenKind::string) text += next().value;
    return make_expr(pos, LiteralExpr{Value::string(std::move(text))});
  }
  if (t.kind == TokenKind::integer) return make_expr(pos, LiteralExpr{Value::integer(next().int_value)});
  if (t.kind == TokenKind::floating) return make_expr(pos, LiteralExpr{Value::floating(next().float_value)});
  if (skip_op("(")) {
    ExprPtr inner = parse_tuple(true, "", true);
    expect_op(")");
    return inner;
  }
  if (is_op("[") || is_op("{")) return parse_list_or_dict();
  fail(str_cat("unexpected ", describe(t)));
}

ExprPtr Parser::parse_list_or_dict() {
  const SourcePos pos = cur().pos;
  const bool is_list = next().value == "[";
  const char* close = is_list ? "]" : "}";
  ListExpr list;
  DictExpr dict;
  while (!is_op(close)) {
    if (!list.items.empty() || !dict.items.empty()) expect_op(",");
    if (is_op(close)) break;
    ExprPtr item = parse_expression();
    if (is_list) {
      list.items.push_back(std::move(item));
    } else {
      expect_op(":");
      dict.items.emplace_back(std::move(item), parse_expression());
    }
  }
  expect_op(close);
  if (is_list) return make_expr(pos, std::move(list));
  return make_expr(pos, std::move(dict));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      const SourcePos pos = cur().pos;
      node = make_expr(pos, CallExpr{std::move(node), parse_call_args()});
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      const SourcePos pos = cur().pos;
      node = make_expr(pos, CallExpr{std::move(node), parse_call_args()});
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& open = next();
  const SourcePos pos = open.pos;
  if (open.value == ".") {
    const Token& attr = next();
    if (attr.kind == TokenKind::name) return make_expr(pos, AttrExpr{std::move(node), attr.value});
    if (attr.kind != TokenKind::integer) fail_at_token(attr, "expected a name or number after '.'");
    return make_expr(pos, ItemExpr{std::move(node), make_expr(attr.pos, LiteralExpr{Value::integer(attr.int_value)})});
  }
  ExprPtr parts[3];
  bool is_slice = false;
  for (int part = 0; part < 3; ++part) {
    if (!is_op(":") && !is_op("]")) {
      if (part > 0 && !is_slice) break;
      parts[part] = parse_expression();
    }
    if (part == 2 || !skip_op(":")) break;
    is_slice = true;
  }
  if (is_op(",")) fail("tuple subscripts (a[1, 2]) are not supported");
  expect_op("]");
  if (!is_slice) {
    if (!parts[0]) fail("expected an expression in []");
    return make_expr(pos, ItemExpr{std::move(node), std::move(parts[0])});
  }
  return make_expr(pos, SliceExpr{std::move(node), std::move(parts[0]), std::move(parts[1]), std::move(parts[2])});
}

std::string Parser::parse_dotted_name() {
  std::string n = expect_identifier();
  while (skip_op(".")) n += "." + expect_identifier();
  return n;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& name_token = cur();
    FilterExpr f;
    f.name = parse_dotted_name();
    if (!find_filter(f.name)) {
      fail_at_token(name_token, is_unsupported_filter(f.name) ? str_cat("filter '", f.name, "' is not supported")
                                                              : str_cat("unknown filter '", f.name, "'"));
    }
    if (is_op("(")) f.args = parse_call_args();
    f.operand = std::move(node);
    node = make_expr(name_token.pos, std::move(f));
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const SourcePos pos = next().pos;  // `is`
  TestExpr t;
  t.negated = skip_name("not");
  const Token& name_token = cur();
  t.name = parse_dotted_name();
  if (!find_test(t.name)) {
    fail_at_token(name_token, is_unsupported_test(t.name) ? str_cat("test '", t.name, "' is not supported")
                                                          : str_cat("unknown test '", t.name, "'"));
  }
  if (is_op("(")) {
    t.args = parse_call_args();
  } else {
    const TokenKind k = cur().kind;
    const bool arg_start = k == TokenKind::name || k == TokenKind::string || k == TokenKind::integer ||
                           k == TokenKind::floating || is_op("[") || is_op("{");
    if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      t.args.args.push_back(parse_postfix(parse_primary()));
    }
  }
  t.operand = std::move(node);
  return make_expr(pos, std::move(t));
}

ArgsExpr Parser::parse_call_args() {
  const Token& open = cur();
  expect_op("(");
  ArgsExpr a;
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().kind == TokenKind::name && look().kind == TokenKind::op && look().value == "=") {
      std::string key = next().value;
      next();
      a.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!a.kwargs.empty()) fail_at_token(open, "invalid syntax for function call expression");
      a.args.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
  return a;
}

}  // namespace

Program jinja_parse(std::string_view source, const std::string& template_name) {
  Program program;
  program.name = template_name;
  Parser parser(jinja_lex(source, template_name), program.name);
  program.body = parser.parse_template();
  return program;
}

}  // namespace troupe::jinja
