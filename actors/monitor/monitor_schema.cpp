// msgpack encoding of the monitor's messages (actors/monitor/monitor_schema.hpp).
#include "actors/monitor/monitor_schema.hpp"

#include <msgpack.hpp>

#include <map>

#include "base/check.hpp"
#include "schedules/msgpack_types.hpp"
#include "schedules/trace_msgpack.hpp"

namespace troupe::actors {

using schedules::msgpack_is_int;

using schedules::msgpack_type_name;

namespace {

// An integer that int64 holds (msgpack's as<int64_t>() throws a bare std::bad_cast past it).
bool fits_int64(const msgpack::object& x) { return schedules::msgpack_int_in(x, INT64_MIN, INT64_MAX).has_value(); }

bool is_number(const msgpack::object& x) {
  return msgpack_is_int(x) || x.type == msgpack::type::FLOAT32 || x.type == msgpack::type::FLOAT64;
}

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_value(Packer& pk, int64_t v) { pk.pack_int64(v); }
void pack_value(Packer& pk, uint64_t v) { pk.pack_uint64(v); }
void pack_value(Packer& pk, double v) { pk.pack_double(v); }  // NaN and inf survive as IEEE bits
void pack_value(Packer& pk, bool v) { v ? pk.pack_true() : pk.pack_false(); }
void pack_value(Packer& pk, const std::string& v) { pk.pack(v); }
void pack_value(Packer& pk, const std::vector<int64_t>& v) {
  pk.pack_array(uint32_t(v.size()));
  for (int64_t x : v) pk.pack_int64(x);
}
void pack_value(Packer& pk, const std::vector<double>& v) {
  pk.pack_array(uint32_t(v.size()));
  for (double x : v) pk.pack_double(x);
}
void pack_value(Packer& pk, const std::vector<schedules::TraceEvent>& v) {
  pk.pack_array(uint32_t(v.size()));
  for (const schedules::TraceEvent& e : v) schedules::trace_event_pack(pk, e);
}

// A decoded map's fields by key; reads name the message type and key in every error.
class Fields {
 public:
  Fields(const msgpack::object& map, std::string type) : type_(std::move(type)) {
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& kv = map.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR) fields_[std::string(kv.key.via.str.ptr, kv.key.via.str.size)] = kv.val;
    }
  }
  void set_type(std::string type) { type_ = std::move(type); }
  // A field added within the version: absent (an older writer) reads as `value`.
  void set_default(const char* key, const msgpack::object& value) { fields_.emplace(key, value); }

  void operator()(const char* key, int64_t& v) const {
    const msgpack::object& o = get(key, fits_int64, "an integer (int64)");
    v = *schedules::msgpack_int_in(o, INT64_MIN, INT64_MAX);
  }
  void operator()(const char* key, uint64_t& v) const {
    const msgpack::object& o = get(
        key, [](const msgpack::object& x) { return x.type == msgpack::type::POSITIVE_INTEGER; },
        "a non-negative integer");
    v = o.as<uint64_t>();
  }
  void operator()(const char* key, double& v) const {
    const msgpack::object& o = get(key, is_number, "a number");
    v = o.as<double>();
  }
  void operator()(const char* key, bool& v) const {
    v = get(
            key, [](const msgpack::object& x) { return x.type == msgpack::type::BOOLEAN; }, "a boolean")
            .via.boolean;
  }
  void operator()(const char* key, std::string& v) const {
    const msgpack::object& o = get(
        key, [](const msgpack::object& x) { return x.type == msgpack::type::STR; }, "a string");
    v.assign(o.via.str.ptr, o.via.str.size);
  }
  void operator()(const char* key, std::vector<int64_t>& v) const {
    const msgpack::object& o = get(
        key, [](const msgpack::object& x) { return x.type == msgpack::type::ARRAY; }, "an array of integers");
    v.clear();
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      const msgpack::object& x = o.via.array.ptr[i];
      TROUPE_CHECK(fits_int64(x), "monitor message \"", type_, "\": \"", key, "\"[", i, "] is ", msgpack_type_name(x),
                   ", expected an integer (int64)");
      v.push_back(*schedules::msgpack_int_in(x, INT64_MIN, INT64_MAX));
    }
  }
  void operator()(const char* key, std::vector<double>& v) const {
    const msgpack::object& o = get(
        key, [](const msgpack::object& x) { return x.type == msgpack::type::ARRAY; }, "an array of numbers");
    v.clear();
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      const msgpack::object& x = o.via.array.ptr[i];
      TROUPE_CHECK(is_number(x), "monitor message \"", type_, "\": \"", key, "\"[", i, "] is ", msgpack_type_name(x),
                   ", expected a number");
      v.push_back(x.as<double>());
    }
  }
  void operator()(const char* key, std::vector<schedules::TraceEvent>& v) const {
    const msgpack::object& o = get(
        key, [](const msgpack::object& x) { return x.type == msgpack::type::ARRAY; }, "an array of trace events");
    v.clear();
    for (uint32_t i = 0; i < o.via.array.size; ++i)
      v.push_back(schedules::trace_event_parse(o.via.array.ptr[i], str_cat("monitor message \"", type_, "\""), i));
  }

 private:
  template <class Pred>
  const msgpack::object& get(const char* key, Pred ok, const char* expected) const {
    auto it = fields_.find(key);
    TROUPE_CHECK(it != fields_.end(), "monitor message \"", type_, "\" lacks the field \"", key, "\"");
    TROUPE_CHECK(ok(it->second), "monitor message \"", type_, "\": \"", key, "\" is ", msgpack_type_name(it->second),
                 ", expected ", expected);
    return it->second;
  }

  std::string type_;
  std::map<std::string, msgpack::object> fields_;
};

template <class T>
MonitorBody decode_body(const Fields& fields) {
  T body;
  monitor_fields(body, fields);
  return body;
}

}  // namespace

const char* monitor_type_name(const MonitorBody& body) {
  static const char* const names[] = {"hello", "iteration", "validation", "end", "trace", "stages", "serving"};
  static_assert(std::variant_size_v<MonitorBody> == 7);
  return names[body.index()];
}

std::string monitor_encode(const MonitorMessage& m) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  std::visit(
      [&](const auto& body) {
        uint32_t n = 0;
        monitor_fields(body, [&](const char*, const auto&) { ++n; });
        pk.pack_map(5 + n);
        pk.pack(std::string("version")), pk.pack_int64(kMonitorSchemaVersion);
        pk.pack(std::string("type")), pk.pack(std::string(monitor_type_name(m.body)));
        pk.pack(std::string("seq")), pack_value(pk, m.seq);
        pk.pack(std::string("repeat")), pack_value(pk, m.repeat);
        pk.pack(std::string("unix_ms")), pack_value(pk, m.unix_ms);
        monitor_fields(body, [&](const char* key, const auto& value) {
          pk.pack(std::string(key));
          pack_value(pk, value);
        });
      },
      m.body);
  return std::string(buf.data(), buf.size());
}

MonitorMessage monitor_decode(std::string_view bytes) {
  msgpack::object_handle handle;
  size_t offset = 0;
  try {
    // Limits keep a corrupt length from allocating gigabytes.
    const msgpack::unpack_limit limit(/*array=*/1 << 16, /*map=*/1 << 10, /*str=*/1 << 20, /*bin=*/1 << 20,
                                      /*ext=*/1 << 20, /*depth=*/5);
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    TROUPE_FAIL("malformed monitor message (", bytes.size(), " bytes): ", e.what());
  }
  TROUPE_CHECK(offset == bytes.size(), "malformed monitor message: ", bytes.size() - offset,
               " bytes after the msgpack map");
  const msgpack::object& o = handle.get();
  TROUPE_CHECK(o.type == msgpack::type::MAP, "malformed monitor message: ", msgpack_type_name(o), ", expected a map");
  Fields fields(o, "(envelope)");
  int64_t version = 0;
  fields("version", version);
  TROUPE_CHECK(version == kMonitorSchemaVersion, "monitor message schema version ", version,
               " is not supported: this troupe reads version ", kMonitorSchemaVersion,
               " (use a troupe monitor built from the same release as the run)");
  std::string type;
  fields("type", type);
  fields.set_type(type);
  MonitorMessage m;
  fields("seq", m.seq);
  fields("repeat", m.repeat);
  fields("unix_ms", m.unix_ms);
  if (type == "hello") {
    // Added with `troupe serve`: a training run's hello from before says neither.
    msgpack::object train;
    train.type = msgpack::type::STR, train.via.str.ptr = "train", train.via.str.size = 5;
    msgpack::object zero;
    zero.type = msgpack::type::POSITIVE_INTEGER, zero.via.u64 = 0;
    fields.set_default("kind", train);
    fields.set_default("replicas", zero);
    m.body = decode_body<MonitorHello>(fields);
  } else if (type == "iteration") {
    // Added with the straggler report (and later fields): an older run's record says none of these.
    msgpack::object unknown;
    unknown.type = msgpack::type::FLOAT64, unknown.via.f64 = NAN;
    msgpack::object none;
    none.type = msgpack::type::STR, none.via.str.ptr = "", none.via.str.size = 0;
    msgpack::object empty;
    empty.type = msgpack::type::ARRAY, empty.via.array.ptr = nullptr, empty.via.array.size = 0;
    fields.set_default("elapsed_seconds", unknown);
    fields.set_default("eta_seconds", unknown);
    fields.set_default("stragglers", none);
    fields.set_default("straggler_devices", empty);
    // Added with mixture-of-experts models: an older run's record reports no router.
    fields.set_default("load_balancing_loss", unknown);
    fields.set_default("z_loss", unknown);
    fields.set_default("moe_layers", empty);
    fields.set_default("expert_load_max", empty);
    fields.set_default("expert_load_mean", empty);
    m.body = decode_body<MonitorIteration>(fields);
  } else if (type == "validation")
    m.body = decode_body<MonitorValidation>(fields);
  else if (type == "end")
    m.body = decode_body<MonitorEnd>(fields);
  else if (type == "trace") {
    // Added with uneven pipeline splits: an older run's trace says nothing, its split was even.
    msgpack::object even;
    even.type = msgpack::type::ARRAY, even.via.array.ptr = nullptr, even.via.array.size = 0;
    fields.set_default("chunk_layers", even);
    m.body = decode_body<MonitorTrace>(fields);
  } else if (type == "stages")
    m.body = decode_body<MonitorStages>(fields);
  else if (type == "serving")
    m.body = decode_body<MonitorServing>(fields);
  else
    throw UnknownMonitorType(str_cat("unknown monitor message type \"", type, "\" (version ", version,
                                     " has hello, iteration, validation, end, trace, stages, serving)"));
  return m;
}

}  // namespace troupe::actors
