#include "data/chat/jinja_repr.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_unicode.hpp"

namespace troupe::jinja {
namespace {

std::string hex_escape(const char* prefix, unsigned width, char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, static_cast<int>(width), static_cast<unsigned>(cp));
  return buf;
}

// Python's unicode_repr: single quotes unless the text has ' and no ".
std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (python_isprintable(cp)) {
      utf8_append(out, cp);
    } else if (cp < 0x100) {
      out += hex_escape("\\x", 2, cp);
    } else if (cp < 0x10000) {
      out += hex_escape("\\u", 4, cp);
    } else {
      out += hex_escape("\\U", 8, cp);
    }
  }
  out += quote;
  return out;
}

std::string items_repr(const std::vector<Value>& items, size_t from) {
  std::string out;
  for (size_t i = from; i < items.size(); ++i) {
    if (i > from) out += ", ";
    out += to_repr(items[i]);
  }
  return out;
}

std::string dict_repr(const Dict& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i > 0) out += ", ";
    out.append(to_repr(d.items[i].first)).append(": ").append(to_repr(d.items[i].second));
  }
  return out.append("}");
}

// open + body + close, appended (GCC 12 warns, -Wrestrict, on "literal" + std::string temporaries).
std::string wrap(const char* open, const std::string& body, const char* close) {
  std::string out(open);
  return out.append(body).append(close);
}

std::string seq_repr(const Seq& s) {
  switch (s.kind) {
    case SeqKind::list:
      return wrap("[", items_repr(s.items, 0), "]");
    case SeqKind::tuple:
      return wrap("(", items_repr(s.items, 0), s.items.size() == 1 ? ",)" : ")");
    case SeqKind::range:
      return str_cat("range(", s.range_start, ", ", s.range_stop,
                     s.range_step == 1 ? std::string() : str_cat(", ", s.range_step), ")");
    case SeqKind::dict_keys:
      return wrap("dict_keys([", items_repr(s.items, 0), "])");
    case SeqKind::dict_values:
      return wrap("dict_values([", items_repr(s.items, 0), "])");
    case SeqKind::dict_items:
      return wrap("dict_items([", items_repr(s.items, 0), "])");
    case SeqKind::iterator:
      break;
  }
  throw JinjaError("printing an iterator (the result of map, select, reverse, items...) is not supported");
}

}  // namespace

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // shortest round-trip digits: "-1.5e+300", "1e-05"
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] >= '0' && sci[i] <= '9') digits += sci[i];
  const int decpt = std::atoi(sci.c_str() + e + 1) + 1;  // x = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out(x < 0 ? "-" : "");  // appended to: see wrap()
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (decpt >= n) {
      out.append(digits).append(static_cast<size_t>(decpt - n), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt)).append(".").append(digits, static_cast<size_t>(decpt));
    }
    return out;
  }
  out.append(digits, 0, 1);
  if (n > 1) out.append(".").append(digits, 1);
  const int exponent = decpt - 1;
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out.append(exp_buf);
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.text();
  return to_repr(v);
}

std::string to_repr(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return float_repr(v.as_float());
  if (v.is_string()) return v.is_markup() ? wrap("Markup(", string_repr(v.text()), ")") : string_repr(v.text());
  if (v.is_seq()) return seq_repr(v.seq());
  if (v.is_dict()) return dict_repr(v.dict());
  if (v.is_namespace()) return wrap("<Namespace ", dict_repr(v.ns().attrs), ">");
  throw JinjaError(str_cat("printing a '", type_name(v), "' object is not supported (Python shows its address)"));
}

}  // namespace troupe::jinja
