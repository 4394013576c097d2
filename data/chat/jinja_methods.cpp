#include "data/chat/jinja_methods.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <unordered_map>

#include "data/chat/jinja_args.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

using StrMethod = Value (*)(const Value& self, const CallArgs& args);

Value str_result(const Value& self, std::string text) { return Value::string(std::move(text), self.is_markup()); }

Value list_of_strings(const std::vector<std::string>& parts, const Value& self) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(str_result(self, p));
  return Value::sequence(std::move(items));
}

Value strip_method(const Value& self, const CallArgs& args, bool left, bool right, const char* name) {
  ArgBinder a(args, str_cat("str.", name), {"chars"});
  const std::optional<std::string> chars = a.get_string(0);
  if (!chars) return str_result(self, python_strip(self.text(), nullptr, left, right));
  const std::u32string set = utf8_decode(*chars);
  return str_result(self, python_strip(self.text(), &set, left, right));
}

Value split_method(const Value& self, const CallArgs& args, bool from_right) {
  ArgBinder a(args, from_right ? "str.rsplit" : "str.split", {"sep", "maxsplit"});
  return list_of_strings(python_split(self.text(), a.get_string(0), a.get_int(1, -1), from_right), self);
}

// startswith/endswith(prefix) with a str or a tuple of str.
Value affix_method(const Value& self, const CallArgs& args, bool at_start) {
  const char* what = at_start ? "str.startswith" : "str.endswith";
  ArgBinder a(args, what, {"prefix", "start", "end"}, 1);
  if (a.has(1) || a.has(2)) throw JinjaError(str_cat(what, " with start/end is not supported"));
  const Value prefix = a.get(0);
  std::vector<Value> options;
  if (prefix.is_seq() && prefix.seq().kind == SeqKind::tuple)
    options = prefix.seq().items;
  else
    options.push_back(prefix);
  const std::string& s = self.text();
  for (const Value& o : options) {
    if (!o.is_string()) throw JinjaError(str_cat(what, " first arg must be str or a tuple of str, not ", type_name(o)));
    const std::string& p = o.text();
    if (p.size() <= s.size() && s.compare(at_start ? 0 : s.size() - p.size(), p.size(), p) == 0)
      return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value replace_method(const Value& self, const CallArgs& args) {
  ArgBinder a(args, "str.replace", {"old", "new", "count"}, 2);
  const Value old_v = a.get(0), new_v = a.get(1);
  if (!old_v.is_string() || !new_v.is_string()) throw JinjaError("str.replace arguments must be str");
  int64_t count = a.get_int(2, -1);
  const std::string &s = self.text(), &old = old_v.text(), &repl = new_v.text();
  std::string out;
  if (old.empty()) {  // inserts `new` between characters, and at both ends
    const std::u32string cps = utf8_decode(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count != 0) {
        out += repl;
        --count;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return str_result(self, out);
  }
  size_t pos = 0;
  for (size_t hit; count != 0 && (hit = s.find(old, pos)) != std::string::npos; --count) {
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
  }
  out.append(s, pos);
  return str_result(self, out);
}

std::string required_str(const ArgBinder& a, size_t i) {
  const Value v = a.get(i);
  if (!v.is_string()) throw JinjaError(str_cat(a.what(), " argument must be str, not ", type_name(v)));
  return v.text();
}

Value find_method_impl(const Value& self, const CallArgs& args, bool from_right, bool raise) {
  ArgBinder a(args, raise ? "str.index" : "str.find", {"sub", "start", "end"}, 1);
  if (a.has(1) || a.has(2)) throw JinjaError(str_cat(a.what(), " with start/end is not supported"));
  const std::string sub = required_str(a, 0);
  const size_t hit = from_right ? self.text().rfind(sub) : self.text().find(sub);
  if (hit == std::string::npos) {
    if (raise) throw JinjaError("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(self.text()).substr(0, hit))));
}

Value count_method(const Value& self, const CallArgs& args) {
  ArgBinder a(args, "str.count", {"sub"}, 1);
  const std::string sub = required_str(a, 0);
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(self.text())) + 1);
  int64_t n = 0;
  for (size_t pos = self.text().find(sub); pos != std::string::npos; pos = self.text().find(sub, pos + sub.size())) ++n;
  return Value::integer(n);
}

Value join_method(const Value& self, const CallArgs& args) {
  ArgBinder a(args, "str.join", {"iterable"}, 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(a.get(0))) {
    if (!item.is_string())
      throw JinjaError(str_cat("sequence item: expected str instance, ", type_name(item), " found"));
    if (!first) out += self.text();
    out += item.text();
    first = false;
  }
  return str_result(self, out);
}

Value pad_method(const Value& self, const CallArgs& args, char where) {
  ArgBinder a(args, where == 'c' ? "str.center" : (where == 'l' ? "str.ljust" : "str.rjust"), {"width", "fillchar"}, 1);
  const int64_t width = a.get_int(0, 0);
  const std::u32string fill = utf8_decode(a.get_string(1).value_or(" "));
  if (fill.size() != 1) throw JinjaError("the fill character must be exactly one character long");
  const int64_t len = static_cast<int64_t>(utf8_length(self.text()));
  if (width <= len) return self;
  const int64_t pad = width - len;
  int64_t left = where == 'l' ? 0 : (where == 'r' ? pad : pad / 2 + (pad & width & 1));
  std::string out;
  for (int64_t i = 0; i < left; ++i) utf8_append(out, fill[0]);
  out += self.text();
  for (int64_t i = 0; i < pad - left; ++i) utf8_append(out, fill[0]);
  return str_result(self, out);
}

Value partition_method(const Value& self, const CallArgs& args, bool from_right) {
  ArgBinder a(args, from_right ? "str.rpartition" : "str.partition", {"sep"}, 1);
  const std::string sep = required_str(a, 0);
  if (sep.empty()) throw JinjaError("empty separator");
  const std::string& s = self.text();
  const size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  std::vector<Value> parts;
  if (hit == std::string::npos) {
    parts = from_right ? std::vector<Value>{str_result(self, ""), str_result(self, ""), self}
                       : std::vector<Value>{self, str_result(self, ""), str_result(self, "")};
  } else {
    parts = {str_result(self, s.substr(0, hit)), str_result(self, sep), str_result(self, s.substr(hit + sep.size()))};
  }
  return Value::sequence(std::move(parts), SeqKind::tuple);
}

Value affix_remove(const Value& self, const CallArgs& args, bool prefix) {
  ArgBinder a(args, prefix ? "str.removeprefix" : "str.removesuffix", {"affix"}, 1);
  const std::string affix = required_str(a, 0);
  const std::string& s = self.text();
  if (affix.size() > s.size()) return self;
  if (prefix && s.compare(0, affix.size(), affix) == 0) return str_result(self, s.substr(affix.size()));
  if (!prefix && s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
    return str_result(self, s.substr(0, s.size() - affix.size()));
  return self;
}

template <std::string (*F)(std::string_view)>
Value case_method(const Value& self, const CallArgs& args) {
  ArgBinder a(args, "str method", {});
  return str_result(self, F(self.text()));
}

template <bool (*F)(std::string_view)>
Value predicate_method(const Value& self, const CallArgs& args) {
  ArgBinder a(args, "str method", {});
  return Value::boolean(F(self.text()));
}

bool is_space_string(std::string_view s) {
  const std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), python_isspace);
}

const std::unordered_map<std::string, StrMethod>& str_methods() {
  static const std::unordered_map<std::string, StrMethod> methods = {
      {"strip", [](const Value& s, const CallArgs& a) { return strip_method(s, a, true, true, "strip"); }},
      {"lstrip", [](const Value& s, const CallArgs& a) { return strip_method(s, a, true, false, "lstrip"); }},
      {"rstrip", [](const Value& s, const CallArgs& a) { return strip_method(s, a, false, true, "rstrip"); }},
      {"split", [](const Value& s, const CallArgs& a) { return split_method(s, a, false); }},
      {"rsplit", [](const Value& s, const CallArgs& a) { return split_method(s, a, true); }},
      {"splitlines",
       [](const Value& s, const CallArgs& a) {
         ArgBinder b(a, "str.splitlines", {"keepends"});
         return list_of_strings(python_splitlines(s.text(), b.get_bool(0, false)), s);
       }},
      {"startswith", [](const Value& s, const CallArgs& a) { return affix_method(s, a, true); }},
      {"endswith", [](const Value& s, const CallArgs& a) { return affix_method(s, a, false); }},
      {"upper", case_method<python_upper>},
      {"lower", case_method<python_lower>},
      {"title", case_method<python_title>},
      {"capitalize", case_method<python_capitalize>},
      {"swapcase", case_method<python_swapcase>},
      {"replace", replace_method},
      {"find", [](const Value& s, const CallArgs& a) { return find_method_impl(s, a, false, false); }},
      {"rfind", [](const Value& s, const CallArgs& a) { return find_method_impl(s, a, true, false); }},
      {"index", [](const Value& s, const CallArgs& a) { return find_method_impl(s, a, false, true); }},
      {"rindex", [](const Value& s, const CallArgs& a) { return find_method_impl(s, a, true, true); }},
      {"count", count_method},
      {"join", join_method},
      {"center", [](const Value& s, const CallArgs& a) { return pad_method(s, a, 'c'); }},
      {"ljust", [](const Value& s, const CallArgs& a) { return pad_method(s, a, 'l'); }},
      {"rjust", [](const Value& s, const CallArgs& a) { return pad_method(s, a, 'r'); }},
      {"partition", [](const Value& s, const CallArgs& a) { return partition_method(s, a, false); }},
      {"rpartition", [](const Value& s, const CallArgs& a) { return partition_method(s, a, true); }},
      {"removeprefix", [](const Value& s, const CallArgs& a) { return affix_remove(s, a, true); }},
      {"removesuffix", [](const Value& s, const CallArgs& a) { return affix_remove(s, a, false); }},
      {"isupper", predicate_method<python_isupper>},
      {"islower", predicate_method<python_islower>},
      {"isalpha", predicate_method<python_isalpha>},
      {"isdigit", predicate_method<python_isdigit>},
      {"isalnum", predicate_method<python_isalnum>},
      {"isspace", predicate_method<is_space_string>},
  };
  return methods;
}

// Python's other str methods: found, but refused when called.
bool is_other_str_method(const std::string& name) {
  static const char* const kOther[] = {"casefold", "encode",    "expandtabs",   "format",    "format_map",
                                       "isascii",  "isdecimal", "isidentifier", "isnumeric", "isprintable",
                                       "istitle",  "maketrans", "translate",    "zfill"};
  return std::find_if(std::begin(kOther), std::end(kOther), [&](const char* m) { return name == m; }) !=
         std::end(kOther);
}

Value refused(const std::string& type, const std::string& name, bool unsafe) {
  const std::string what = str_cat(type, ".", name);
  return Value::callable(
      what,
      [what, unsafe](CallArgs&) -> Value {
        if (unsafe) throw JinjaError(str_cat("calling ", what, " is not allowed (the sandbox makes values immutable)"));
        throw JinjaError(str_cat(what, "() is not supported"));
      },
      unsafe);
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  const Dict& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    return Value::callable("dict." + name, [self, name](CallArgs& args) {
      ArgBinder a(args, "dict." + name, {});
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict().items) {
        if (name == "items")
          out.push_back(Value::sequence({k, v}, SeqKind::tuple));
        else
          out.push_back(name == "keys" ? k : v);
      }
      return Value::sequence(std::move(out), name == "items"  ? SeqKind::dict_items
                                             : name == "keys" ? SeqKind::dict_keys
                                                              : SeqKind::dict_values);
    });
  }
  if (name == "get") {
    return Value::callable("dict.get", [self](CallArgs& args) {
      ArgBinder a(args, "dict.get", {"key", "default"}, 1);
      const Value key = a.get(0);
      check_hashable(key);
      const Value* found = self.dict().find(key);
      return found ? *found : a.get(1, Value::none());
    });
  }
  if (name == "copy") return Value::callable("dict.copy", [d](CallArgs&) { return Value::dict(d); });
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return refused("dict", name, true);
  if (name == "fromkeys") return refused("dict", name, false);
  return std::nullopt;
}

std::optional<Value> seq_method(const Value& self, const std::string& name) {
  const SeqKind kind = self.seq().kind;
  if (kind != SeqKind::list && kind != SeqKind::tuple) return std::nullopt;
  const std::string type = kind == SeqKind::list ? "list" : "tuple";
  if (name == "count" || name == "index") {
    return Value::callable(type + "." + name, [self, name, type](CallArgs& args) {
      ArgBinder a(args, type + "." + name, {"value"}, 1);
      const Value x = a.get(0);
      int64_t n = 0;
      for (size_t i = 0; i < self.seq().items.size(); ++i) {
        if (!equals(self.seq().items[i], x)) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw JinjaError(str_cat(type, ".index(x): x not in ", type));
      return Value::integer(n);
    });
  }
  if (kind == SeqKind::list && name == "copy")
    return Value::callable("list.copy", [self](CallArgs&) { return Value::sequence(self.seq().items); });
  static const char* const kMutators[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  if (kind == SeqKind::list)
    for (const char* m : kMutators)
      if (name == m) return refused("list", name, true);
  return std::nullopt;
}

// Markup methods that HTML-escape their str arguments (markupsafe); not modelled.
bool escapes_arguments(const std::string& name) {
  static const char* const kEscaping[] = {"replace",   "join",       "strip",        "lstrip",
                                          "rstrip",    "center",     "ljust",        "rjust",
                                          "partition", "rpartition", "removeprefix", "removesuffix"};
  return std::any_of(std::begin(kEscaping), std::end(kEscaping), [&](const char* m) { return name == m; });
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    const auto& methods = str_methods();
    if (auto it = methods.find(name); it != methods.end()) {
      const StrMethod m = it->second;
      const bool refuse_arguments = obj.is_markup() && escapes_arguments(name);
      return Value::callable("str." + name, [obj, m, name, refuse_arguments](CallArgs& args) {
        if (refuse_arguments && !(args.args.empty() && args.kwargs.empty()))
          throw JinjaError(
              str_cat("Markup.", name, "() with arguments (on a |safe or |escape result) is not supported"));
        return m(obj, args);
      });
    }
    if (is_other_str_method(name)) return refused("str", name, false);
    return std::nullopt;
  }
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_seq()) return seq_method(obj, name);
  return std::nullopt;
}

std::vector<std::string> python_split(const std::string& text, const std::optional<std::string>& sep, int64_t maxsplit,
                                      bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw JinjaError("empty separator");
    if (!from_right) {
      size_t pos = 0;
      for (size_t hit; maxsplit > 0 && (hit = text.find(*sep, pos)) != std::string::npos; --maxsplit) {
        out.push_back(text.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.push_back(text.substr(pos));
      return out;
    }
    size_t end = text.size();
    for (; maxsplit > 0 && end >= sep->size(); --maxsplit) {
      const size_t hit = text.rfind(*sep, end - sep->size());
      if (hit == std::string::npos) break;
      out.push_back(text.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.push_back(text.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string cps = utf8_decode(text);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  const size_t n = cps.size();
  std::vector<std::u32string> parts;
  for (; maxsplit > 0; --maxsplit) {
    while (i < n && python_isspace(cps[i])) ++i;
    if (i == n) break;
    const size_t j = i;
    while (i < n && !python_isspace(cps[i])) ++i;
    parts.push_back(cps.substr(j, i - j));
  }
  while (i < n && python_isspace(cps[i])) ++i;
  if (i < n) parts.push_back(cps.substr(i));
  if (from_right) {
    std::reverse(parts.begin(), parts.end());
    for (auto& p : parts) std::reverse(p.begin(), p.end());
  }
  for (const auto& p : parts) out.push_back(utf8_encode(p));
  return out;
}

std::vector<std::string> python_splitlines(const std::string& text, bool keepends) {
  const std::u32string cps = utf8_decode(text);
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_break(cps[i])) continue;
    size_t end = i + 1;
    if (cps[i] == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    out.push_back(utf8_encode(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) out.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return out;
}

}  // namespace troupe::jinja
