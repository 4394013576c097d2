// A monitor record (actors/monitor/monitor_schema.hpp) as a JSON object with the wire's keys, for
// `troupe monitor --once` and the dashboard's /api/history. NaN numbers become null (JSON has
// no NaN). Not for `trace` records: their events are arrays of the trace file, not JSON.
#pragma once

#include <nlohmann/json.hpp>

#include "actors/monitor/monitor_schema.hpp"

namespace troupe::actors {

template <class Record>
nlohmann::ordered_json monitor_json(const Record& r) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  monitor_fields(r, [&](const char* key, const auto& value) { j[key] = value; });
  return j;
}

}  // namespace troupe::actors
