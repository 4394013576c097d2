// One trace event as msgpack, the array of the trace file (schedules/trace.hpp), for other
// containers of events: the monitor's `trace` message carries the same arrays.
#pragma once

#include <msgpack.hpp>

#include <cstddef>
#include <string>

#include "schedules/trace.hpp"

namespace troupe::schedules {

void trace_event_pack(msgpack::packer<msgpack::sbuffer>& pk, const TraceEvent& e);
// Throws troupe::Error naming `what`, the event's index and the bad field. `version`: the
// format version of the file (trace.hpp: how it reads unknown kinds); live messages (the
// monitor's) are of this troupe's.
TraceEvent trace_event_parse(const msgpack::object& o, const std::string& what, size_t index,
                             int version = kTraceFormatVersion);

}  // namespace troupe::schedules
