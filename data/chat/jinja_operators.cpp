#include "data/chat/jinja_operators.hpp"

#include <cmath>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_repr.hpp"

namespace troupe::jinja {
namespace {

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "+";
    case BinaryOp::sub:
      return "-";
    case BinaryOp::mul:
      return "*";
    case BinaryOp::div:
      return "/";
    case BinaryOp::floordiv:
      return "//";
    case BinaryOp::mod:
      return "%";
    case BinaryOp::pow:
      return "** or pow()";
    default:
      return "?";
  }
}

[[noreturn]] void unsupported(BinaryOp op, const Value& a, const Value& b) {
  throw JinjaError(
      str_cat("unsupported operand type(s) for ", op_symbol(op), ": '", type_name(a), "' and '", type_name(b), "'"));
}

[[noreturn]] void overflow() { throw JinjaError("integer overflow (Python would compute an arbitrary-precision int)"); }

template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) overflow();
  return r;
}

bool mul_overflows(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }
bool add_overflows(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub_overflows(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked(mul_overflows, result, base);
    exp >>= 1;
    if (exp > 0) base = checked(mul_overflows, base, base);
  }
  return result;
}

Value int_op(BinaryOp op, int64_t x, int64_t y) {
  switch (op) {
    case BinaryOp::add:
      return Value::integer(checked(add_overflows, x, y));
    case BinaryOp::sub:
      return Value::integer(checked(sub_overflows, x, y));
    case BinaryOp::mul:
      return Value::integer(checked(mul_overflows, x, y));
    case BinaryOp::div:
      if (y == 0) throw JinjaError("division by zero");
      return Value::floating(static_cast<double>(x) / static_cast<double>(y));
    case BinaryOp::floordiv:
    case BinaryOp::mod: {
      if (y == 0) throw JinjaError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == BinaryOp::floordiv ? q : m);
    }
    case BinaryOp::pow:
      if (y < 0) {
        if (x == 0) throw JinjaError("0.0 cannot be raised to a negative power");
        return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      return Value::integer(int_pow(x, y));
    default:
      break;
  }
  throw JinjaError("bad operator");
}

Value float_op(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::add:
      return Value::floating(x + y);
    case BinaryOp::sub:
      return Value::floating(x - y);
    case BinaryOp::mul:
      return Value::floating(x * y);
    case BinaryOp::div:
      if (y == 0) throw JinjaError("float division by zero");
      return Value::floating(x / y);
    case BinaryOp::floordiv:
    case BinaryOp::mod: {
      if (y == 0) throw JinjaError("float modulo");
      double m = std::fmod(x, y);  // Python's float_divmod
      double div = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          div -= 1.0;
        }
      } else {
        m = std::copysign(0.0, y);
      }
      double floordiv = 0;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return Value::floating(op == BinaryOp::floordiv ? floordiv : m);
    }
    case BinaryOp::pow:
      if (x == 0 && y < 0) throw JinjaError("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) throw JinjaError("a negative number to a fractional power is complex");
      if (std::isfinite(x) && std::isfinite(y) && !std::isfinite(std::pow(x, y)))
        throw JinjaError("(34, 'Numerical result out of range')");  // Python's OverflowError
      return Value::floating(std::pow(x, y));
    default:
      break;
  }
  throw JinjaError("bad operator");
}

Value repeat(const Value& seq_or_str, int64_t times) {
  if (seq_or_str.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq_or_str.text();
    return Value::string(std::move(out), seq_or_str.is_markup());
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i)
    items.insert(items.end(), seq_or_str.seq().items.begin(), seq_or_str.seq().items.end());
  return Value::sequence(std::move(items), seq_or_str.seq().kind);
}

bool is_list_or_tuple(const Value& v) {
  return v.is_seq() && (v.seq().kind == SeqKind::list || v.seq().kind == SeqKind::tuple);
}

// Markup + str escapes the str; str + Markup likewise (markupsafe's __add__ / __radd__).
Value add_strings(const Value& a, const Value& b) {
  if (a.is_markup() == b.is_markup()) return Value::string(a.text() + b.text(), a.is_markup());
  const std::string left = a.is_markup() ? a.text() : html_escape(a.text());
  const std::string right = b.is_markup() ? b.text() : html_escape(b.text());
  return Value::string(left + right, true);
}

Value add(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) return add_strings(a, b);
  if (is_list_or_tuple(a) && is_list_or_tuple(b) && a.seq().kind == b.seq().kind) {
    std::vector<Value> items = a.seq().items;
    items.insert(items.end(), b.seq().items.begin(), b.seq().items.end());
    return Value::sequence(std::move(items), a.seq().kind);
  }
  if (a.is_string() || is_list_or_tuple(a))
    throw JinjaError(str_cat("can only concatenate ", type_name(a), " (not \"", type_name(b), "\") to ", type_name(a)));
  unsupported(BinaryOp::add, a, b);
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_op(op, to_double(a), to_double(b));
    return int_op(op, to_index(a, ""), to_index(b, ""));
  }
  if (op == BinaryOp::add) return add(a, b);
  if (op == BinaryOp::mul) {
    const bool a_repeats = a.is_string() || is_list_or_tuple(a);
    const bool b_repeats = b.is_string() || is_list_or_tuple(b);
    if (a_repeats && (b.is_int() || b.is_bool())) return repeat(a, to_index(b, ""));
    if (b_repeats && (a.is_int() || a.is_bool())) return repeat(b, to_index(a, ""));
  }
  if (op == BinaryOp::mod && a.is_string())
    throw JinjaError("string formatting with % is not supported (use ~ or |string)");
  unsupported(op, a, b);
}

Value unary_op(UnaryOp op, const Value& v) {
  if (op == UnaryOp::not_) return Value::boolean(!truthy(v));
  require_defined(v);
  if (v.is_float()) return Value::floating(op == UnaryOp::neg ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    const int64_t i = to_index(v, "");
    if (op == UnaryOp::neg && i == INT64_MIN) overflow();
    return Value::integer(op == UnaryOp::neg ? -i : i);
  }
  throw JinjaError(str_cat("bad operand type for unary ", op == UnaryOp::neg ? "-" : "+", ": '", type_name(v), "'"));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw JinjaError(str_cat("'in <string>' requires string as left operand, not ", type_name(item)));
    return container.text().find(item.text()) != std::string::npos;
  }
  if (container.is_dict()) {
    check_hashable(item);
    return container.dict().find(item) != nullptr;
  }
  if (container.is_undefined() || container.is_seq()) {
    for (const Value& v : iterate(container))
      if (equals(v, item)) return true;
    return false;
  }
  throw JinjaError(str_cat("argument of type '", type_name(container), "' is not iterable"));
}

bool compare_op(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::eq:
      return equals(a, b);
    case CompareOp::ne:
      return !equals(a, b);
    case CompareOp::in:
      return contains(b, a);
    case CompareOp::not_in:
      return !contains(b, a);
    default:
      break;
  }
  if ((a.is_float() && std::isnan(a.as_float())) || (b.is_float() && std::isnan(b.as_float()))) {
    require_defined(a);
    require_defined(b);
    return false;
  }
  const int c = compare(a, b);
  switch (op) {
    case CompareOp::lt:
      return c < 0;
    case CompareOp::le:
      return c <= 0;
    case CompareOp::gt:
      return c > 0;
    default:
      return c >= 0;
  }
}

}  // namespace troupe::jinja
