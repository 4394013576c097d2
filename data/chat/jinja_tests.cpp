#include "data/chat/jinja_tests.hpp"

#include <unordered_map>

#include "data/chat/jinja_args.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_filters.hpp"
#include "data/chat/jinja_operators.hpp"
#include "data/chat/jinja_repr.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

Value one_arg(const CallArgs& args, const char* test) {
  return ArgBinder(args, str_cat("test '", test, "'"), {"other"}, 1).get(0);
}

void no_args(const CallArgs& args, const char* test) { ArgBinder(args, str_cat("test '", test, "'"), {}); }

bool remainder_is(const Value& value, const Value& divisor, int64_t expected) {
  return equals(binary_op(BinaryOp::mod, value, divisor), Value::integer(expected));
}

bool is_sequence(const Value& v) {
  if (v.is_undefined() || v.is_string() || v.is_dict()) return true;
  if (!v.is_seq()) return false;
  const SeqKind k = v.seq().kind;
  return k == SeqKind::list || k == SeqKind::tuple || k == SeqKind::range;
}

bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_dict() || v.is_seq() || v.is_object();
}

bool same_as(const Value& a, const Value& b) {
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_bool() && b.is_bool()) return a.as_bool() == b.as_bool();
  if (a.identity() && b.identity()) return a.identity() == b.identity();
  if (a.is_bool() || b.is_bool()) return false;
  throw JinjaError("'sameas' is only supported for none, true, false and containers");
}

// Tests of a value's type and kind.
void add_type_tests(std::unordered_map<std::string, TestFn>& table) {
  table.insert({
      {"defined",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "defined");
         return !v.is_undefined();
       }},
      {"undefined",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "undefined");
         return v.is_undefined();
       }},
      {"none",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "none");
         return v.is_none();
       }},
      {"boolean",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "boolean");
         return v.is_bool();
       }},
      {"true",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "true");
         return v.is_bool() && v.as_bool();
       }},
      {"false",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "false");
         return v.is_bool() && !v.as_bool();
       }},
      {"integer",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "integer");
         return v.is_int();
       }},
      {"float",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "float");
         return v.is_float();
       }},
      {"number",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "number");
         return v.is_number();
       }},
      {"string",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "string");
         return v.is_string();
       }},
      {"mapping",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "mapping");
         return v.is_dict();
       }},
      {"sequence",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "sequence");
         return is_sequence(v);
       }},
      {"iterable",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "iterable");
         return is_iterable(v);
       }},
      {"callable",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "callable");
         return v.is_callable();
       }},
      {"escaped",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "escaped");
         return v.is_markup();
       }},
  });
}

// Tests of a value's content and comparisons.
void add_value_tests(std::unordered_map<std::string, TestFn>& table) {
  table.insert({
      {"odd",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "odd");
         return remainder_is(v, Value::integer(2), 1);
       }},
      {"even",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "even");
         return remainder_is(v, Value::integer(2), 0);
       }},
      {"divisibleby", [](const Value& v, const CallArgs& a) { return remainder_is(v, one_arg(a, "divisibleby"), 0); }},
      {"lower",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "lower");
         return python_islower(to_str(v));
       }},
      {"upper",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "upper");
         return python_isupper(to_str(v));
       }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(one_arg(a, "in"), v); }},
      {"sameas", [](const Value& v, const CallArgs& a) { return same_as(v, one_arg(a, "sameas")); }},
      {"eq", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::eq, v, one_arg(a, "eq")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::ne, v, one_arg(a, "ne")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::lt, v, one_arg(a, "lt")); }},
      {"le", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::le, v, one_arg(a, "le")); }},
      {"gt", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::gt, v, one_arg(a, "gt")); }},
      {"ge", [](const Value& v, const CallArgs& a) { return compare_op(CompareOp::ge, v, one_arg(a, "ge")); }},
      {"filter",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "filter");
         return v.is_string() && find_filter(v.text()) != nullptr;
       }},
      {"test",
       [](const Value& v, const CallArgs& a) {
         no_args(a, "test");
         return v.is_string() && find_test(v.text()) != nullptr;
       }},
  });
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    add_type_tests(t);
    add_value_tests(t);
    return t;
  }();
  return table;
}

// Jinja's aliases of the comparison tests.
std::string_view canonical(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

const TestFn* find_test(std::string_view name) {
  const auto& table = tests();
  const auto it = table.find(std::string(canonical(name)));
  return it == table.end() ? nullptr : &it->second;
}

bool is_unsupported_test(std::string_view) { return false; }  // every Jinja builtin test is implemented

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  const TestFn* test = find_test(name);
  if (!test) throw JinjaError(str_cat("unknown test '", name, "'"));
  return (*test)(value, args);
}

}  // namespace troupe::jinja
