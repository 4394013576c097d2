// Python's operators on template values: + - * / // % ** (int overflow is an error, not a
// bigint), unary - + not, comparisons and `in`. Markup strings (from |safe / |escape) escape
// the plain text added to them, as markupsafe does.
//
//   binary_op(BinaryOp::floordiv, Value::integer(-7), Value::integer(2))  // -4
//   binary_op(BinaryOp::add, Value::string("a"), Value::integer(1))      // JinjaError
//   contains(Value::string("abc"), Value::string("b"))                    // true ('b' in 'abc')
#pragma once

#include "data/chat/jinja_ast.hpp"
#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

// The arithmetic operators (not and/or, which the interpreter short-circuits).
Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value unary_op(UnaryOp op, const Value& v);
bool compare_op(CompareOp op, const Value& a, const Value& b);
// `item in container`.
bool contains(const Value& container, const Value& item);

}  // namespace troupe::jinja
