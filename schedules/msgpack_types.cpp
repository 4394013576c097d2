#include "schedules/msgpack_types.hpp"

namespace troupe::schedules {

bool msgpack_is_int(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
}

std::optional<int64_t> msgpack_int_in(const msgpack::object& o, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    v = o.via.i64;
  } else if (o.type == msgpack::type::POSITIVE_INTEGER && o.via.u64 <= uint64_t(INT64_MAX)) {
    v = int64_t(o.via.u64);
  } else {
    return std::nullopt;
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

const char* msgpack_type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "a boolean";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "an integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a float";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "binary";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    default:
      return "an extension";
  }
}

}  // namespace troupe::schedules
