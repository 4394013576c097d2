// The syntax tree jinja_parse builds and the Interpreter walks: expressions (Expr) and
// statements (Stmt), each with the position of its first token for error messages. It mirrors
// jinja2.nodes for the subset chat templates use.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct ArgsExpr {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct LiteralExpr {  // 'a', 1, 2.5, true, none (and adjacent strings joined)
  Value value;
};
struct NameExpr {
  std::string name;
};
struct ListExpr {  // [a, b] or (a, b)
  std::vector<ExprPtr> items;
  bool tuple = false;
};
struct DictExpr {  // {k: v, ...}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct AttrExpr {  // object.name
  ExprPtr object;
  std::string name;
};
struct ItemExpr {  // object[index] and object.0
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr {  // object[start:stop:step], each part optional (null)
  ExprPtr object, start, stop, step;
};
struct CallExpr {  // callee(args)
  ExprPtr callee;
  ArgsExpr args;
};
struct FilterExpr {  // operand | name(args); operand is null in {% filter %} and {% set x | f %}
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
};
struct TestExpr {  // operand is [not] name(args)
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
  bool negated = false;
};
enum class UnaryOp { neg, pos, not_ };
struct UnaryExpr {
  UnaryOp op;
  ExprPtr operand;
};
enum class BinaryOp { add, sub, mul, div, floordiv, mod, pow, and_, or_ };
struct BinaryExpr {
  BinaryOp op;
  ExprPtr left, right;
};
struct ConcatExpr {  // a ~ b ~ c
  std::vector<ExprPtr> parts;
};
enum class CompareOp { eq, ne, lt, le, gt, ge, in, not_in };
struct CompareExpr {  // first op1 x1 op2 x2 ... (chained as in Python)
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct CondExpr {  // then if test else otherwise (otherwise may be null: undefined)
  ExprPtr test, then, otherwise;
};

struct Expr {
  SourcePos pos;
  std::variant<LiteralExpr, NameExpr, ListExpr, DictExpr, AttrExpr, ItemExpr, SliceExpr, CallExpr, FilterExpr, TestExpr,
               UnaryExpr, BinaryExpr, ConcatExpr, CompareExpr, CondExpr>
      node;
};

struct Stmt;
using Body = std::vector<Stmt>;

// Where {% set %}, {% for %} and {% with %} store: a name, names to unpack, or ns.attr.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;  // `a, b` (names.size() may be 1 with a trailing comma)
  std::string ns_attr;  // non-empty: names[0].ns_attr
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool catch_varargs = false;  // the body names `varargs`
  bool catch_kwargs = false;   // the body names `kwargs`
};

struct TextStmt {
  std::string text;
};
struct OutputStmt {  // {{ expr }}
  ExprPtr expr;
};
struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and elif
  Body otherwise;
};
struct ForStmt {
  Target target;
  ExprPtr iterable;
  ExprPtr condition;  // {% for x in xs if cond %}, may be null
  Body body;
  Body otherwise;
};
struct SetStmt {
  Target target;
  ExprPtr value;
};
struct SetBlockStmt {  // {% set x | filter %}...{% endset %}
  Target target;
  ExprPtr filter;  // may be null
  Body body;
};
struct MacroStmt {
  std::shared_ptr<MacroDef> macro;
};
struct CallBlockStmt {  // {% call(params) callee(args) %}body{% endcall %}: body is `caller`
  std::shared_ptr<MacroDef> caller;
  ExprPtr call;  // a CallExpr
};
struct FilterBlockStmt {
  ExprPtr filter;
  Body body;
};
struct WithStmt {
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct ScopeStmt {  // {% generation %}: its body in a scope of its own
  Body body;
};
struct LoopControlStmt {  // {% break %} / {% continue %}
  bool is_break = false;
};

struct Stmt {
  SourcePos pos;
  std::variant<TextStmt, OutputStmt, IfStmt, ForStmt, SetStmt, SetBlockStmt, MacroStmt, CallBlockStmt, FilterBlockStmt,
               WithStmt, ScopeStmt, LoopControlStmt>
      node;
};

struct Program {
  std::string name;  // for error messages
  Body body;
};

}  // namespace troupe::jinja
