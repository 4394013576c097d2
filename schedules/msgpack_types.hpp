// Naming what a decoded msgpack value is, for errors about files and messages that do not
// hold what they should ("... is a string, expected an integer"). Shared by the trace reader
// and the monitor's message decoder.
#pragma once

#include <msgpack.hpp>

namespace troupe::schedules {

// "nil", "a boolean", "an integer", "a float", "a string", "binary", "an array", "a map", "an extension".
const char* msgpack_type_name(const msgpack::object& o);
bool msgpack_is_int(const msgpack::object& o);

}  // namespace troupe::schedules
