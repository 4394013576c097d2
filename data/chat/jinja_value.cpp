#include "data/chat/jinja_value.hpp"

#include <algorithm>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {

Value Value::sequence(std::vector<Value> items, SeqKind kind) {
  auto seq = std::make_shared<Seq>();
  seq->kind = kind;
  seq->items = std::move(items);
  return Value(std::move(seq));
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn, bool unsafe) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(fn), unsafe}));
}

Value Value::object(std::string type_name, Dict attrs) {
  return Value(std::make_shared<Object>(Object{std::move(type_name), std::move(attrs)}));
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& x) -> const void* {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::shared_ptr<Seq>> || std::is_same_v<T, std::shared_ptr<Dict>> ||
                      std::is_same_v<T, std::shared_ptr<Namespace>> || std::is_same_v<T, std::shared_ptr<Callable>> ||
                      std::is_same_v<T, std::shared_ptr<Object>>)
          return x.get();
        else
          return nullptr;
      },
      v_);
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

Value* Dict::find(const Value& key) {
  for (auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return v.is_markup() ? "Markup" : "str";
  if (v.is_dict()) return "dict";
  if (v.is_namespace()) return "Namespace";
  if (v.is_callable()) return "function";
  if (v.is_object()) return v.object().type_name;
  switch (v.seq().kind) {
    case SeqKind::list:
      return "list";
    case SeqKind::tuple:
      return "tuple";
    case SeqKind::iterator:
      return "generator";
    case SeqKind::range:
      return "range";
    case SeqKind::dict_keys:
      return "dict_keys";
    case SeqKind::dict_values:
      return "dict_values";
    case SeqKind::dict_items:
      return "dict_items";
  }
  return "object";
}

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int() != 0;
  if (v.is_float()) return v.as_float() != 0.0;
  if (v.is_string()) return !v.text().empty();
  if (v.is_dict()) return !v.dict().items.empty();
  if (v.is_seq()) return v.seq().kind == SeqKind::iterator || !v.seq().items.empty();
  return true;  // namespace, function, object
}

double to_double(const Value& v) {
  if (v.is_float()) return v.as_float();
  if (v.is_int()) return static_cast<double>(v.as_int());
  if (v.is_bool()) return v.as_bool() ? 1.0 : 0.0;
  throw JinjaError(str_cat("expected a number, got '", type_name(v), "'"));
}

int64_t to_index(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  throw JinjaError(str_cat(what, " must be an integer, not '", type_name(v), "'"));
}

namespace {

bool numbers_equal(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float()) return to_double(a) == to_double(b);
  return to_index(a, "") == to_index(b, "");
}

bool seqs_equal(const Seq& a, const Seq& b) {
  if (a.kind == SeqKind::iterator || b.kind == SeqKind::iterator) return &a == &b;
  if (a.kind == SeqKind::dict_keys || a.kind == SeqKind::dict_items || a.kind == SeqKind::dict_values)
    throw JinjaError("comparing dict views is not supported");
  if (a.kind != b.kind || a.items.size() != b.items.size()) return false;
  for (size_t i = 0; i < a.items.size(); ++i)
    if (!equals(a.items[i], b.items[i])) return false;
  return true;
}

bool dicts_equal(const Dict& a, const Dict& b) {
  if (a.items.size() != b.items.size()) return false;
  for (const auto& [k, v] : a.items) {
    const Value* other = b.find(k);
    if (!other || !equals(v, *other)) return false;
  }
  return true;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.text() == b.text();
  if (a.is_seq() && b.is_seq()) return seqs_equal(a.seq(), b.seq());
  if (a.is_dict() && b.is_dict()) return dicts_equal(a.dict(), b.dict());
  const void* id = a.identity();
  return id != nullptr && id == b.identity();
}

int compare(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      const int64_t x = to_index(a, ""), y = to_index(b, "");
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = to_double(a), y = to_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);  // NaN compares as equal here and false in Python's <
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.text().compare(b.text());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  const bool same_seq = a.is_seq() && b.is_seq() && a.seq().kind == b.seq().kind &&
                        (a.seq().kind == SeqKind::list || a.seq().kind == SeqKind::tuple);
  if (same_seq) {
    const auto& x = a.seq().items;
    const auto& y = b.seq().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw JinjaError(str_cat("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'"));
}

void check_hashable(const Value& v) {
  if (v.is_dict() || (v.is_seq() && v.seq().kind == SeqKind::list))
    throw JinjaError(str_cat("unhashable type: '", type_name(v), "'"));
  if (v.is_seq() && v.seq().kind == SeqKind::tuple)
    for (const Value& item : v.seq().items) check_hashable(item);
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw JinjaError(v.undefined_hint());
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_string()) {
    std::vector<Value> out;
    for (char32_t cp : utf8_decode(v.text())) {
      std::string ch;
      utf8_append(ch, cp);
      out.push_back(Value::string(std::move(ch)));  // iterating a Markup gives plain str
    }
    return out;
  }
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& kv : v.dict().items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_seq()) {
    Seq& seq = v.seq();
    if (seq.kind != SeqKind::iterator) return seq.items;
    std::vector<Value> rest(seq.items.begin() + static_cast<std::ptrdiff_t>(seq.consumed), seq.items.end());
    seq.consumed = seq.items.size();
    return rest;
  }
  throw JinjaError(str_cat("'", type_name(v), "' object is not iterable"));
}

int64_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(utf8_length(v.text()));
  if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_seq() && v.seq().kind != SeqKind::iterator) return static_cast<int64_t>(v.seq().items.size());
  throw JinjaError(str_cat("object of type '", type_name(v), "' has no len()"));
}

}  // namespace troupe::jinja
