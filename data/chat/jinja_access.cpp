#include "data/chat/jinja_access.hpp"

#include <optional>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_methods.hpp"
#include "data/chat/jinja_repr.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

// jinja2.utils.object_type_repr: how an Undefined's hint names the object.
std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  return type_name(obj) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(str_cat("'", object_type_repr(obj), "' has no attribute '", name, "'"));
}

Value missing_element(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attribute(obj, key.text());
  return Value::undefined(str_cat(object_type_repr(obj), " has no element ", to_repr(key)));
}

// Attributes Python numbers have that this renderer does not model.
bool is_number_attribute(const std::string& name) {
  static const char* const kAttrs[] = {"real",       "imag",      "numerator", "denominator",      "conjugate",
                                       "bit_length", "bit_count", "to_bytes",  "as_integer_ratio", "is_integer",
                                       "hex",        "fromhex"};
  for (const char* a : kAttrs)
    if (name == a) return true;
  return false;
}

std::optional<Value> python_attribute(const Value& obj, const std::string& name) {
  if (obj.is_namespace()) {
    const Value* v = obj.ns().attrs.find(Value::string(name));
    return v ? std::optional<Value>(*v) : std::nullopt;
  }
  if (obj.is_object()) {
    const Value* v = obj.object().attrs.find(Value::string(name));
    return v ? std::optional<Value>(*v) : std::nullopt;
  }
  if (obj.is_number() && is_number_attribute(name))
    throw JinjaError(str_cat("attribute '", name, "' of a number is not supported"));
  return find_method(obj, name);
}

// Python's obj[key] (without the attribute fallback); nullopt where Python raises
// TypeError/LookupError, which Jinja turns into an Undefined.
std::optional<Value> python_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (key.is_dict() || (key.is_seq() && key.seq().kind == SeqKind::list)) return std::nullopt;  // unhashable
    const Value* v = obj.dict().find(key);
    return v ? std::optional<Value>(*v) : std::nullopt;
  }
  const bool indexable =
      obj.is_string() || (obj.is_seq() && (obj.seq().kind == SeqKind::list || obj.seq().kind == SeqKind::tuple ||
                                           obj.seq().kind == SeqKind::range));
  if (!indexable || !(key.is_int() || key.is_bool())) return std::nullopt;
  int64_t i = to_index(key, "index");
  if (obj.is_string()) {
    const std::u32string cps = utf8_decode(obj.text());
    const auto n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    std::string ch;
    utf8_append(ch, cps[static_cast<size_t>(i)]);
    return Value::string(std::move(ch), obj.is_markup());
  }
  const auto& items = obj.seq().items;
  const auto n = static_cast<int64_t>(items.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return items[static_cast<size_t>(i)];
}

// PySlice_GetIndicesEx: the indices obj[start:stop:step] visits.
std::vector<size_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  const int64_t step = given(step_v) ? to_index(step_v, "slice step") : 1;
  if (step == 0) throw JinjaError("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (!given(v)) return fallback;
    int64_t i = to_index(v, "slice index");
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (std::optional<Value> attr = python_attribute(obj, name)) return *attr;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(Value::string(name))) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (std::optional<Value> item = python_item(obj, key)) return *item;
  if (key.is_string()) {
    if (std::optional<Value> attr = python_attribute(obj, key.text())) return *attr;
  }
  return missing_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto valid_part = [](const Value& v) { return v.is_undefined() || v.is_none() || v.is_int() || v.is_bool(); };
  if (!valid_part(start) || !valid_part(stop) || !valid_part(step)) return Value::undefined("invalid slice index");
  if (obj.is_string()) {
    const std::u32string cps = utf8_decode(obj.text());
    std::u32string out;
    for (size_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step)) out.push_back(cps[i]);
    return Value::string(utf8_encode(out), obj.is_markup());
  }
  if (obj.is_seq() && (obj.seq().kind == SeqKind::list || obj.seq().kind == SeqKind::tuple)) {
    const auto& items = obj.seq().items;
    std::vector<Value> out;
    for (size_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step)) out.push_back(items[i]);
    return Value::sequence(std::move(out), obj.seq().kind);
  }
  if (obj.is_seq() && obj.seq().kind == SeqKind::range) throw JinjaError("slicing a range is not supported");
  return Value::undefined(str_cat(object_type_repr(obj), " is not subscriptable"));
}

}  // namespace troupe::jinja
