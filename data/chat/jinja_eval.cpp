// Expression evaluation of the Interpreter (statements are in jinja_interpreter.cpp).
#include "data/chat/jinja_access.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_filters.hpp"
#include "data/chat/jinja_globals.hpp"
#include "data/chat/jinja_interpreter.hpp"
#include "data/chat/jinja_operators.hpp"
#include "data/chat/jinja_repr.hpp"
#include "data/chat/jinja_tests.hpp"

namespace troupe::jinja {

Value Interpreter::eval(const Expr& e, Scope* scope) {
  try {
    return eval_node(e, scope);
  } catch (const JinjaError& err) {
    fail_at(program_.name, e.pos, err.what());
  }
}

Value Interpreter::eval_node(const Expr& e, Scope* scope) {
  return std::visit(
      [&](const auto& n) -> Value {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, LiteralExpr>) {
          return n.value;
        } else if constexpr (std::is_same_v<T, NameExpr>) {
          return lookup(n.name, scope);
        } else if constexpr (std::is_same_v<T, ListExpr> || std::is_same_v<T, DictExpr>) {
          return eval_collection(e, scope);
        } else if constexpr (std::is_same_v<T, AttrExpr>) {
          return get_attr(eval(*n.object, scope), n.name);
        } else if constexpr (std::is_same_v<T, ItemExpr>) {
          const Value object = eval(*n.object, scope);
          return get_item(object, eval(*n.index, scope));
        } else if constexpr (std::is_same_v<T, SliceExpr>) {
          const Value object = eval(*n.object, scope);
          auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
          const Value start = part(n.start), stop = part(n.stop), step = part(n.step);
          return get_slice(object, start, stop, step);
        } else if constexpr (std::is_same_v<T, CallExpr>) {
          return eval_call(n, scope);
        } else if constexpr (std::is_same_v<T, FilterExpr>) {
          const Value operand = eval(*n.operand, scope);
          return apply_filter(n.name, operand, eval_args(n.args, scope));
        } else if constexpr (std::is_same_v<T, TestExpr>) {
          const Value operand = eval(*n.operand, scope);
          return Value::boolean(apply_test(n.name, operand, eval_args(n.args, scope)) != n.negated);
        } else if constexpr (std::is_same_v<T, UnaryExpr>) {
          return unary_op(n.op, eval(*n.operand, scope));
        } else if constexpr (std::is_same_v<T, BinaryExpr>) {
          return eval_binary(n, scope);
        } else if constexpr (std::is_same_v<T, ConcatExpr>) {
          std::string out;
          for (const ExprPtr& part : n.parts) out += to_str(eval(*part, scope));
          return Value::string(std::move(out));
        } else if constexpr (std::is_same_v<T, CompareExpr>) {
          return eval_compare(n, scope);
        } else {
          static_assert(std::is_same_v<T, CondExpr>);
          if (truthy(eval(*n.test, scope))) return eval(*n.then, scope);
          if (n.otherwise) return eval(*n.otherwise, scope);
          return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
        }
      },
      e.node);
}

Value Interpreter::lookup(const std::string& name, Scope* scope) {
  if (const Value* v = scope->find(name)) return *v;
  if (std::optional<Value> g = find_global(name)) return *g;
  return Value::undefined(str_cat("'", name, "' is undefined"));
}

CallArgs Interpreter::eval_args(const ArgsExpr& args, Scope* scope) {
  CallArgs out;
  for (const ExprPtr& a : args.args) out.args.push_back(eval(*a, scope));
  for (const auto& [key, value] : args.kwargs) out.kwargs.emplace_back(key, eval(*value, scope));
  return out;
}

Value Interpreter::eval_call(const CallExpr& c, Scope* scope, std::vector<std::pair<std::string, Value>> extra_kwargs) {
  const Value callee = eval(*c.callee, scope);
  CallArgs args = eval_args(c.args, scope);
  for (auto& kw : extra_kwargs) args.kwargs.push_back(std::move(kw));
  require_defined(callee);
  if (!callee.is_callable()) throw JinjaError(str_cat("'", type_name(callee), "' object is not callable"));
  return callee.callable().fn(args);
}

Value Interpreter::eval_binary(const BinaryExpr& b, Scope* scope) {
  Value left = eval(*b.left, scope);
  if (b.op == BinaryOp::and_) return truthy(left) ? eval(*b.right, scope) : left;
  if (b.op == BinaryOp::or_) return truthy(left) ? left : eval(*b.right, scope);
  const Value right = eval(*b.right, scope);
  return binary_op(b.op, left, right);
}

Value Interpreter::eval_compare(const CompareExpr& c, Scope* scope) {
  Value left = eval(*c.first, scope);
  for (const auto& [op, expr] : c.rest) {
    Value right = eval(*expr, scope);
    if (!compare_op(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_collection(const Expr& e, Scope* scope) {
  if (const auto* list = std::get_if<ListExpr>(&e.node)) {
    std::vector<Value> items;
    for (const ExprPtr& item : list->items) items.push_back(eval(*item, scope));
    return Value::sequence(std::move(items), list->tuple ? SeqKind::tuple : SeqKind::list);
  }
  Dict d;
  for (const auto& [key_expr, value_expr] : std::get<DictExpr>(e.node).items) {
    Value key = eval(*key_expr, scope);
    check_hashable(key);
    d.set(std::move(key), eval(*value_expr, scope));
  }
  return Value::dict(std::move(d));
}

Value Interpreter::apply_filter_chain(const Expr& chain, const Value& input, Scope* scope) {
  const auto& f = std::get<FilterExpr>(chain.node);
  try {
    const Value operand = f.operand ? apply_filter_chain(*f.operand, input, scope) : input;
    return apply_filter(f.name, operand, eval_args(f.args, scope));
  } catch (const JinjaError& err) {
    fail_at(program_.name, chain.pos, err.what());
  }
}

}  // namespace troupe::jinja
