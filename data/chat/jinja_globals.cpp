#include "data/chat/jinja_globals.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "data/chat/jinja_args.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_repr.hpp"

namespace troupe::jinja {
namespace {

// jinja2.sandbox.MAX_RANGE
constexpr int64_t kMaxRange = 100000;

Value range_fn(CallArgs& args) {
  if (!args.kwargs.empty()) throw JinjaError("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    throw JinjaError(str_cat("range expected 1 to 3 arguments, got ", args.args.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (args.args.size() == 1) {
    stop = to_index(args.args[0], "range() argument");
  } else {
    start = to_index(args.args[0], "range() argument");
    stop = to_index(args.args[1], "range() argument");
    if (args.args.size() == 3) step = to_index(args.args[2], "range() argument");
  }
  if (step == 0) throw JinjaError("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange)
      throw JinjaError(str_cat("Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
    items.push_back(Value::integer(i));
  }
  Value r = Value::sequence(std::move(items), SeqKind::range);
  r.seq().range_start = start;
  r.seq().range_stop = stop;
  r.seq().range_step = step;
  return r;
}

// dict(mapping, **kwargs) and namespace(mapping, **kwargs).
Dict dict_from(const CallArgs& args, const char* what) {
  if (args.args.size() > 1) throw JinjaError(str_cat(what, " expected at most 1 positional argument"));
  Dict d;
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw JinjaError(str_cat(what, ": each item must be a pair"));
        check_hashable(kv[0]);
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kwargs) d.set(Value::string(k), v);
  return d;
}

Value raise_exception_fn(CallArgs& args) {
  ArgBinder a(args, "raise_exception", {"message"}, 1);
  throw TemplateRaised(to_str(a.get(0)));
}

Value strftime_now_fn(CallArgs& args) {
  ArgBinder a(args, "strftime_now", {"format"}, 1);
  const Value f = a.get(0);
  if (!f.is_string()) throw JinjaError("strftime_now() argument must be str");
  return Value::string(strftime_now(f.text()));
}

Value refused_global(const std::string& name) {
  return Value::callable(name,
                         [name](CallArgs&) -> Value { throw JinjaError(str_cat("'", name, "()' is not supported")); });
}

}  // namespace

std::string strftime_now(const std::string& format) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm local{};
  localtime_r(&t, &local);
  std::string expanded;  // Python handles %f, %z and %Z itself
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      if (c == 'f') {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(micros));
        expanded += buf;
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      expanded += format.substr(i, 2);
      ++i;
      continue;
    }
    expanded += format[i] == '%' ? "%%" : std::string(1, format[i]);
  }
  std::string out(256 + expanded.size() * 8, '\0');
  const size_t n = std::strftime(out.data(), out.size(), expanded.c_str(), &local);
  out.resize(n);
  return out;
}

std::optional<Value> find_global(const std::string& name) {
  if (name == "range") return Value::callable("range", range_fn);
  if (name == "dict") return Value::callable("dict", [](CallArgs& a) { return Value::dict(dict_from(a, "dict")); });
  if (name == "namespace")
    return Value::callable("namespace", [](CallArgs& a) { return Value::ns(dict_from(a, "namespace")); });
  if (name == "raise_exception") return Value::callable("raise_exception", raise_exception_fn);
  if (name == "strftime_now") return Value::callable("strftime_now", strftime_now_fn);
  if (name == "lipsum" || name == "cycler" || name == "joiner") return refused_global(name);
  return std::nullopt;
}

}  // namespace troupe::jinja
