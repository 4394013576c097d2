// Naming what a decoded msgpack value is, for errors about files and messages that do not
// hold what they should ("... is a string, expected an integer"). Shared by the trace reader
// and the monitor's message decoder.
#pragma once

#include <cstdint>
#include <optional>

#include <msgpack.hpp>

namespace troupe::schedules {

// "nil", "a boolean", "an integer", "a float", "a string", "binary", "an array", "a map", "an extension".
const char* msgpack_type_name(const msgpack::object& o);
bool msgpack_is_int(const msgpack::object& o);
// The value of an integer in [lo, hi]; nullopt for anything else (a float, an integer out of
// range: msgpack's own as<T>() throws std::bad_cast there, which names nothing).
std::optional<int64_t> msgpack_int_in(const msgpack::object& o, int64_t lo, int64_t hi);

}  // namespace troupe::schedules
