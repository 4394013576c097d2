#include "data/chat/jinja_json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_repr.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw JinjaError(str_cat("integer ", u, " is beyond the 64-bit range the renderer supports"));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::sequence(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, v] : j.items()) d.items.emplace_back(Value::string(k), from_json(v));
      return Value::dict(std::move(d));
    }
    default:
      throw JinjaError("binary JSON values are not supported");
  }
}

namespace {

void append_u_escape(std::string& out, unsigned code) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", code);
  out += buf;
}

// json's encode_basestring / encode_basestring_ascii.
std::string json_string(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t cp : utf8_decode(text)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
      if (cp >= 0x10000) {
        const unsigned v = static_cast<unsigned>(cp) - 0x10000;
        append_u_escape(out, 0xD800 | (v >> 10));
        append_u_escape(out, 0xDC00 | (v & 0x3FF));
      } else {
        append_u_escape(out, static_cast<unsigned>(cp));
      }
    } else {
      utf8_append(out, cp);
    }
  }
  return out + "\"";
}

std::string float_json(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return float_repr(x);
}

// A dict key as json.dumps writes it: str as is; int, float, bool and None converted.
std::string key_json(const Value& k, bool ensure_ascii) {
  if (k.is_string()) return json_string(k.text(), ensure_ascii);
  std::string out = "\"";
  if (k.is_bool()) {
    out.append(k.as_bool() ? "true" : "false");
  } else if (k.is_int()) {
    out.append(std::to_string(k.as_int()));
  } else if (k.is_float()) {
    out.append(float_json(k.as_float()));
  } else if (k.is_none()) {
    out.append("null");
  } else {
    throw JinjaError(str_cat("keys must be str, int, float, bool or None, not ", type_name(k)));
  }
  return out.append("\"");
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : o_(o) {
    if (o.separators) {
      item_sep_ = o.separators->first;
      key_sep_ = o.separators->second;
    } else {
      item_sep_ = o.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  void write(const Value& v, int depth) {
    if (v.is_none()) {
      out_ += "null";
    } else if (v.is_bool()) {
      out_ += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
      out_ += std::to_string(v.as_int());
    } else if (v.is_float()) {
      out_ += float_json(v.as_float());
    } else if (v.is_string()) {
      out_ += json_string(v.text(), o_.ensure_ascii);
    } else if (v.is_seq() && (v.seq().kind == SeqKind::list || v.seq().kind == SeqKind::tuple)) {
      write_list(v.seq().items, depth);
    } else if (v.is_dict()) {
      write_dict(v.dict(), depth);
    } else {
      throw JinjaError(str_cat("Object of type ", type_name(v), " is not JSON serializable"));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!o_.indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += *o_.indent;
  }

  void write_list(const std::vector<Value>& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      newline(depth + 1);
      write(items[i], depth + 1);
    }
    newline(depth);
    out_ += ']';
  }

  void write_dict(const Dict& d, int depth) {
    if (d.items.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (o_.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
    out_ += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      newline(depth + 1);
      out_ += key_json(items[i]->first, o_.ensure_ascii);
      out_ += key_sep_;
      write(items[i]->second, depth + 1);
    }
    newline(depth);
    out_ += '}';
  }

  const JsonDumpOptions& o_;
  std::string item_sep_, key_sep_, out_;
};

}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(v, 0);
  return writer.take();
}

}  // namespace troupe::jinja
