#include "schedules/msgpack_types.hpp"

namespace troupe::schedules {

bool msgpack_is_int(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
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
