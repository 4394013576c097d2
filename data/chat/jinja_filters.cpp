#include "data/chat/jinja_filters.hpp"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "data/chat/jinja_access.hpp"
#include "data/chat/jinja_args.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_json.hpp"
#include "data/chat/jinja_methods.hpp"
#include "data/chat/jinja_operators.hpp"
#include "data/chat/jinja_repr.hpp"
#include "data/chat/jinja_tests.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

// jinja2's soft_str: a str (or Markup) as it is, anything else through str().
Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(to_str(v)); }

Value iterator_of(std::vector<Value> items) { return Value::sequence(std::move(items), SeqKind::iterator); }

// jinja2's make_attrgetter: "a.b.0" looked up item by item (digits as indexes).
Value lookup_attribute(Value item, const Value& attribute, const Value* fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& p : python_split(attribute.text(), std::string("."), -1, false)) {
      const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::strtoll(p.c_str(), nullptr, 10)) : Value::string(p));
    }
  } else {
    parts.push_back(attribute);
  }
  for (const Value& part : parts) {
    item = get_item(item, part);
    if (fallback && item.is_undefined()) item = *fallback;
  }
  return item;
}

// The sort key of sort/unique/min/max/dictsort: str lowered unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(python_lower(v.text()));
  return v;
}

Value filter_default(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'default'", {"default_value", "boolean"});
  if (v.is_undefined() || (a.get_bool(1, false) && !truthy(v))) return a.get(0, Value::string(""));
  return v;
}

Value filter_length(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'length'", {});
  return Value::integer(length(v));
}

Value filter_first(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'first'", {});
  if (v.is_seq() && v.seq().kind == SeqKind::iterator) {
    Seq& s = v.seq();
    if (s.consumed >= s.items.size()) return Value::undefined("No first item, sequence was empty.");
    return s.items[s.consumed++];
  }
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'last'", {});
  if (v.is_seq() && v.seq().kind == SeqKind::iterator) throw JinjaError("'generator' object is not reversible");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value filter_join(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'join'", {"d", "attribute"});
  const std::string sep = to_str(a.get(0, Value::string("")));
  std::string out;
  bool first = true;
  for (Value item : iterate(v)) {
    if (a.has(1)) item = lookup_attribute(item, a.get(1), nullptr);
    if (!first) out += sep;
    out += to_str(item);
    first = false;
  }
  return Value::string(std::move(out));
}

Value filter_string_case(const Value& v, const CallArgs& args, std::string (*f)(std::string_view), const char* name) {
  ArgBinder a(args, str_cat("filter '", name, "'"), {});
  const Value s = soft_str(v);
  return Value::string(f(s.text()), s.is_markup());
}

Value filter_trim(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'trim'", {"chars"});
  const Value s = soft_str(v);
  const std::optional<std::string> chars = a.get_string(0);
  if (!chars) return Value::string(python_strip(s.text(), nullptr, true, true), s.is_markup());
  const std::u32string set = utf8_decode(*chars);
  return Value::string(python_strip(s.text(), &set, true, true), s.is_markup());
}

// Jinja's do_title: each run after -, whitespace, (, {, [ or < starts upper-case.
Value filter_title(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'title'", {});
  const Value s = soft_str(v);
  const std::u32string cps = utf8_decode(s.text());
  auto is_sep = [](char32_t c) {
    return python_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    size_t j = i + 1;
    while (j < cps.size() && is_sep(cps[j]) == is_sep(cps[i])) ++j;
    std::string first, rest;
    utf8_append(first, cps[i]);
    out += python_upper(first) + python_lower(utf8_encode(std::u32string_view(cps).substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value::string(std::move(out), s.is_markup());
}

Value filter_replace(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'replace'", {"old", "new", "count"}, 2);
  CallArgs method_args;
  method_args.args = {Value::string(to_str(a.get(0))), Value::string(to_str(a.get(1)))};
  if (a.has(2) && !a.get(2).is_none()) method_args.args.push_back(a.get(2));
  return find_method(Value::string(to_str(v)), "replace")->callable().fn(method_args);
}

Value filter_indent(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'indent'", {"width", "first", "blank"});
  const Value width = a.get(0, Value::integer(4));
  const std::string indention =
      width.is_string() ? width.text()
                        : std::string(static_cast<size_t>(std::max<int64_t>(0, to_index(width, "indent width"))), ' ');
  require_defined(v);
  if (!v.is_string()) throw JinjaError(str_cat("filter 'indent' needs a str, not ", type_name(v)));
  const Value& s = v;
  const std::vector<std::string> lines = python_splitlines(s.text() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent_line = i == 0 ? false : (a.get_bool(2, false) || !lines[i].empty());
    out += (indent_line ? indention : "") + lines[i];
  }
  if (a.get_bool(1, false)) out = indention + out;
  return Value::string(std::move(out), s.is_markup());
}

Value filter_list(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'list'", {});
  return Value::sequence(iterate(v));
}

Value filter_string(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'string'", {});
  return soft_str(v);
}

Value filter_items(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'items'", {});
  if (v.is_undefined()) return iterator_of({});
  if (!v.is_dict()) throw JinjaError("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict().items) items.push_back(Value::sequence({k, val}, SeqKind::tuple));
  return iterator_of(std::move(items));
}

Value filter_reverse(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'reverse'", {});
  if (v.is_string()) return get_slice(v, Value(), Value(), Value::integer(-1));
  if (v.is_seq() && v.seq().kind == SeqKind::iterator) {  // not reversible: list(value) reversed
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::sequence(std::move(items));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return iterator_of(std::move(items));
}

Value filter_escape(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'escape'", {});
  if (v.is_markup()) return v;
  return Value::string(html_escape(to_str(v)), true);
}

Value filter_forceescape(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'forceescape'", {});
  return Value::string(html_escape(to_str(v)), true);
}

Value filter_safe(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'safe'", {});
  return Value::string(to_str(v), true);
}

Value filter_abs(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'abs'", {});
  require_defined(v);
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    const int64_t i = to_index(v, "");
    if (i == INT64_MIN) throw JinjaError("integer overflow");
    return Value::integer(i < 0 ? -i : i);
  }
  throw JinjaError(str_cat("bad operand type for abs(): '", type_name(v), "'"));
}

Value filter_center(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'center'", {"width"});
  CallArgs method_args;
  method_args.args = {a.get(0, Value::integer(80))};
  return find_method(Value::string(to_str(v)), "center")->callable().fn(method_args);
}

Value filter_int(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'int'", {"default", "base"});
  Value fallback = a.get(0, Value::integer(0));
  if (a.get_int(1, 10) != 10) throw JinjaError("filter 'int' with a base other than 10 is not supported");
  require_defined(v);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_bool() ? 1 : 0);
  std::optional<double> d;
  if (v.is_string()) {
    if (std::optional<int64_t> i = parse_python_int(v.text())) return Value::integer(*i);
    d = parse_python_float(v.text());
  } else if (v.is_float()) {
    d = v.as_float();
  }
  if (!d || std::isnan(*d)) return fallback;
  if (std::isinf(*d)) throw JinjaError("cannot convert float infinity to integer");
  if (std::fabs(*d) >= 9.2e18) throw JinjaError("integer beyond the 64-bit range");
  return Value::integer(static_cast<int64_t>(std::trunc(*d)));
}

Value filter_float(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'float'", {"default"});
  require_defined(v);
  if (v.is_number()) return Value::floating(to_double(v));
  if (v.is_string()) {
    if (std::optional<double> d = parse_python_float(v.text())) return Value::floating(*d);
  }
  return a.get(0, Value::floating(0.0));
}

// Python's round(x, ndigits) for a float: correctly rounded, ties to even (as printf does).
double round_float(double x, int64_t ndigits) {
  if (ndigits < 0) throw JinjaError("round() of a float to negative digits is not supported");
  if (!std::isfinite(x) || ndigits > 300) return x;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
  return std::strtod(buf, nullptr);
}

Value filter_round(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'round'", {"precision", "method"});
  const int64_t precision = a.get_int(0, 0);
  const std::string method = a.get_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw JinjaError("method must be common, ceil or floor");
  require_defined(v);
  if (!v.is_number()) throw JinjaError(str_cat("type ", type_name(v), " doesn't define __round__ method"));
  if (method == "common") {
    if (v.is_float()) return Value::floating(round_float(v.as_float(), precision));
    if (precision >= 0) return Value::integer(to_index(v, ""));
    throw JinjaError("round() of an int to negative digits is not supported");
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = to_double(v) * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_map(const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (args.args.empty()) {
    ArgBinder a(args, "filter 'map'", {"attribute", "default"}, 1);
    const Value attribute = a.get(0);
    const Value fallback = a.get(1);
    for (const Value& item : iterate(v))
      out.push_back(lookup_attribute(item, attribute, a.has(1) ? &fallback : nullptr));
    return iterator_of(std::move(out));
  }
  if (!args.args[0].is_string()) throw JinjaError("filter 'map' needs a filter name or attribute=");
  const std::string name = args.args[0].text();
  CallArgs rest{std::vector<Value>(args.args.begin() + 1, args.args.end()), args.kwargs};
  for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest));
  return iterator_of(std::move(out));
}

// select/reject(test, *args) and selectattr/rejectattr(attribute, test, *args).
Value select_or_reject(const Value& v, const CallArgs& args, bool keep, bool by_attribute) {
  if (!args.kwargs.empty()) throw JinjaError("keyword arguments to select/reject are not supported");
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.args.empty()) throw JinjaError("selectattr/rejectattr need an attribute");
    attribute = args.args[next++];
  }
  std::optional<std::string> test;
  if (next < args.args.size()) {
    if (!args.args[next].is_string()) throw JinjaError("the test name must be a str");
    test = args.args[next++].text();
  }
  const CallArgs test_args{std::vector<Value>(args.args.begin() + static_cast<std::ptrdiff_t>(next), args.args.end()),
                           {}};
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? lookup_attribute(item, attribute, nullptr) : item;
    const bool passed = test ? apply_test(*test, subject, test_args) : truthy(subject);
    if (passed == keep) out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value filter_sort(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'sort'", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a.get_bool(0, false), case_sensitive = a.get_bool(1, false);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) {
    const Value key = a.has(2) && !a.get(2).is_none() ? lookup_attribute(item, a.get(2), nullptr) : item;
    keyed.emplace_back(sort_key(key, case_sensitive), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::sequence(std::move(out));
}

Value filter_unique(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'unique'", {"case_sensitive", "attribute"});
  std::vector<Value> seen, out;
  for (const Value& item : iterate(v)) {
    const Value raw = a.has(1) && !a.get(1).is_none() ? lookup_attribute(item, a.get(1), nullptr) : item;
    const Value key = sort_key(raw, a.get_bool(0, false));
    check_hashable(key);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value min_or_max(const Value& v, const CallArgs& args, bool want_max) {
  ArgBinder a(args, want_max ? "filter 'max'" : "filter 'min'", {"case_sensitive", "attribute"});
  std::optional<Value> best, best_key;
  for (const Value& item : iterate(v)) {
    const Value raw = a.has(1) && !a.get(1).is_none() ? lookup_attribute(item, a.get(1), nullptr) : item;
    const Value key = sort_key(raw, a.get_bool(0, false));
    if (!best || (want_max ? compare(key, *best_key) > 0 : compare(key, *best_key) < 0)) {
      best = item;
      best_key = key;
    }
  }
  if (!best) return Value::undefined("No aggregated item, sequence was empty.");
  return *best;
}

Value filter_sum(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'sum'", {"attribute", "start"});
  Value total = a.get(1, Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op(BinaryOp::add, total,
                      a.has(0) && !a.get(0).is_none() ? lookup_attribute(item, a.get(0), nullptr) : item);
  return total;
}

Value filter_dictsort(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'dictsort'", {"case_sensitive", "by", "reverse"});
  require_defined(v);
  if (!v.is_dict()) throw JinjaError(str_cat("filter 'dictsort' needs a dict, not ", type_name(v)));
  const std::string by = a.get_string(1).value_or("key");
  if (by != "key" && by != "value") throw JinjaError("You can only sort by either \"key\" or \"value\"");
  const bool case_sensitive = a.get_bool(0, false), reverse = a.get_bool(2, false);
  std::vector<std::pair<Value, Value>> items = v.dict().items;
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    const Value kx = sort_key(by == "key" ? x.first : x.second, case_sensitive);
    const Value ky = sort_key(by == "key" ? y.first : y.second, case_sensitive);
    return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(Value::sequence({k, val}, SeqKind::tuple));
  return Value::sequence(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filter_tojson(const Value& v, const CallArgs& args) {
  ArgBinder a(args, "filter 'tojson'", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a.get_bool(0, false);
  const Value indent = a.get(1, Value::none());
  if (indent.is_string())
    o.indent = indent.text();
  else if (!indent.is_none())
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, to_index(indent, "indent"))), ' ');
  const Value separators = a.get(2, Value::none());
  if (!separators.is_none()) {
    const std::vector<Value> parts = iterate(separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      throw JinjaError("separators must be a pair of str");
    o.separators = std::make_pair(parts[0].text(), parts[1].text());
  }
  o.sort_keys = a.get_bool(3, false);
  return Value::string(to_json(v, o));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", filter_abs},
      {"capitalize",
       [](const Value& v, const CallArgs& a) { return filter_string_case(v, a, python_capitalize, "capitalize"); }},
      {"center", filter_center},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", filter_first},
      {"float", filter_float},
      {"forceescape", filter_forceescape},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", [](const Value& v, const CallArgs& a) { return filter_string_case(v, a, python_lower, "lower"); }},
      {"map", filter_map},
      {"max", [](const Value& v, const CallArgs& a) { return min_or_max(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return min_or_max(v, a, false); }},
      {"reject", [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, false, true); }},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", filter_safe},
      {"select", [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, true, false); }},
      {"selectattr", [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, true, true); }},
      {"sort", filter_sort},
      {"string", filter_string},
      {"sum", filter_sum},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", [](const Value& v, const CallArgs& a) { return filter_string_case(v, a, python_upper, "upper"); }},
  };
  return table;
}

// Python's "_" rule for numeric literals: only between two digits.
std::optional<std::string> without_underscores(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      out += text[i];
      continue;
    }
    const bool between = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                         std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!between) return std::nullopt;
  }
  return out;
}

}  // namespace

const FilterFn* find_filter(std::string_view name) {
  const auto& table = filters();
  const auto it = table.find(std::string(name));
  return it == table.end() ? nullptr : &it->second;
}

bool is_unsupported_filter(std::string_view name) {
  static const char* const kJinjaBuiltins[] = {"attr",      "batch",  "filesizeformat", "format",    "groupby",
                                               "pprint",    "random", "slice",          "striptags", "truncate",
                                               "urlencode", "urlize", "wordcount",      "wordwrap",  "xmlattr"};
  return std::any_of(std::begin(kJinjaBuiltins), std::end(kJinjaBuiltins), [&](const char* f) { return name == f; });
}

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  const FilterFn* f = find_filter(name);
  if (!f) throw JinjaError(str_cat("unknown filter '", name, "'"));
  return (*f)(input, args);
}

std::optional<int64_t> parse_python_int(std::string_view text) {
  const std::string stripped = python_strip(text, nullptr, true, true);
  std::optional<std::string> digits = without_underscores(stripped);
  if (!digits || digits->empty()) return std::nullopt;
  size_t i = (*digits)[0] == '+' || (*digits)[0] == '-' ? 1 : 0;
  if (i == digits->size()) return std::nullopt;
  for (size_t k = i; k < digits->size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>((*digits)[k]))) return std::nullopt;
  errno = 0;
  const long long value = std::strtoll(digits->c_str(), nullptr, 10);
  if (errno == ERANGE) throw JinjaError("integer beyond the 64-bit range");
  return value;
}

std::optional<double> parse_python_float(std::string_view text) {
  std::string s = python_strip(text, nullptr, true, true);
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t sign = !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
  const std::string body = lower.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double magnitude = body == "nan" ? std::nan("") : HUGE_VAL;
    return sign && lower[0] == '-' ? -magnitude : magnitude;
  }
  std::optional<std::string> clean = without_underscores(s);
  if (!clean || clean->empty()) return std::nullopt;
  // digits [. digits] [e [sign] digits], with at least one digit in the mantissa
  size_t i = sign, mantissa_digits = 0;
  while (i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i]))) ++i, ++mantissa_digits;
  if (i < clean->size() && (*clean)[i] == '.')
    for (++i; i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i])); ++i) ++mantissa_digits;
  if (mantissa_digits == 0) return std::nullopt;
  if (i < clean->size() && ((*clean)[i] == 'e' || (*clean)[i] == 'E')) {
    ++i;
    if (i < clean->size() && ((*clean)[i] == '+' || (*clean)[i] == '-')) ++i;
    const size_t exp_start = i;
    while (i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i]))) ++i;
    if (i == exp_start) return std::nullopt;
  }
  if (i != clean->size()) return std::nullopt;
  return std::strtod(clean->c_str(), nullptr);
}

}  // namespace troupe::jinja
