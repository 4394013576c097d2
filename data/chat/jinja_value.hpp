// The values a chat template computes with, and Python's rules for them: what is true, equal,
// ordered, iterable and how long. Templates are written for Python Jinja, so a value behaves
// as the Python object Jinja would hold: int (64-bit here; overflow is an error, not a bigint),
// float, str (UTF-8, indexed by code point), list/tuple, dict (insertion-ordered, as JSON
// objects arrive), None and Jinja's default Undefined.
//
//   Value v = Value::list({Value::integer(1), Value::string("a")});
//   truthy(v) == true;  length(v) == 2;  to_repr(v) == "[1, 'a']"  (jinja_repr.hpp)
//   Value u = Value::undefined("'x' is undefined");   // renders "", falsy, fails when used
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::jinja {

class Value;

// Jinja's default Undefined: renders as "", is false, iterates as empty, equals only another
// Undefined; attribute access, calls and arithmetic fail with `hint` ("'x' is undefined").
struct Undefined {
  std::string hint;
};
struct None {};
// A str. `markup` marks markupsafe.Markup (what |safe and |escape return): text added to it
// with + is HTML-escaped first, and |escape leaves it as it is.
struct Str {
  std::string text;
  bool markup = false;
};

// What a sequence is in Python: list and tuple print differently and never compare equal;
// an iterator (what |map, |select, |reverse... return: a generator) can be used only once and
// has no len(); dict views print as dict_items([...]).
enum class SeqKind : uint8_t { list, tuple, iterator, range, dict_keys, dict_values, dict_items };
struct Seq {
  SeqKind kind = SeqKind::list;
  std::vector<Value> items;
  size_t consumed = 0;                                      // iterator: items already taken
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // range: what repr() shows
};

// Insertion-ordered keys, compared with Python's == (1 and True are the same key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(Value key, Value value);
};

// jinja2's namespace(): attributes set with {% set ns.x = ... %}.
struct Namespace {
  Dict attrs;
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// A function, bound method or macro. `unsafe` marks what the immutable sandbox refuses to call
// (list.append, dict.update, ...): looking it up is allowed, calling it is an error.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
  bool unsafe = false;
};

// An object with attributes only (jinja2's LoopContext `loop`); printing it is refused.
struct Object {
  std::string type_name;
  Dict attrs;
};

class Value {
 public:
  using Variant = std::variant<Undefined, None, bool, int64_t, double, Str, std::shared_ptr<Seq>, std::shared_ptr<Dict>,
                               std::shared_ptr<Namespace>, std::shared_ptr<Callable>, std::shared_ptr<Object>>;

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double f) { return Value(f); }
  static Value string(std::string text, bool markup = false) { return Value(Str{std::move(text), markup}); }
  static Value sequence(std::vector<Value> items, SeqKind kind = SeqKind::list);
  static Value dict(Dict d) { return Value(std::make_shared<Dict>(std::move(d))); }
  static Value ns(Dict attrs) { return Value(std::make_shared<Namespace>(Namespace{std::move(attrs)})); }
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn, bool unsafe = false);
  static Value object(std::string type_name, Dict attrs);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  // int, float or bool (a bool is an int in Python).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<Str>(v_); }
  bool is_seq() const { return std::holds_alternative<std::shared_ptr<Seq>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v_); }
  bool is_markup() const { return is_string() && std::get<Str>(v_).markup; }

  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& text() const { return std::get<Str>(v_).text; }
  Seq& seq() const { return *std::get<std::shared_ptr<Seq>>(v_); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  // Python's `is` for the shared kinds (list, dict, namespace, function, object).
  const void* identity() const;
  const Variant& variant() const { return v_; }

 private:
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  Variant v_;
};

// Python's type(x).__name__: "int", "str", "list", "dict", "NoneType", "Undefined", ...
std::string type_name(const Value& v);
// bool(x).
bool truthy(const Value& v);
// x == y.
bool equals(const Value& a, const Value& b);
// The order of a and b (<0, 0, >0) as Python's < sees it; throws JinjaError where Python raises
// TypeError ("'<' not supported between instances of 'int' and 'str'").
int compare(const Value& a, const Value& b);
// Throws JinjaError where Python's hash() would fail (list, dict as a dict key).
void check_hashable(const Value& v);
// int or bool as an int; throws JinjaError naming `what` for anything else.
int64_t to_index(const Value& v, const char* what);
// int/float/bool as a double.
double to_double(const Value& v);

// list(iter(x)): a dict's keys, a str's characters, a sequence's items; an Undefined gives
// nothing; an iterator is used up. Throws JinjaError for what Python cannot iterate.
std::vector<Value> iterate(const Value& v);
// len(x); throws JinjaError where Python has no len() (int, iterator).
int64_t length(const Value& v);
// Throws JinjaError with the Undefined's hint when `v` is undefined.
void require_defined(const Value& v);

}  // namespace troupe::jinja
