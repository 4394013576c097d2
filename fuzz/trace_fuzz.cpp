// Schedule trace files (schedules/trace.*): msgpack bytes to a Trace, then every view of it.
#include <cstdint>
#include <exception>

#include "fuzz/fuzz_util.hpp"
#include "schedules/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const troupe::schedules::Trace t = troupe::schedules::trace_from_msgpack(troupe::fuzz::as_text(data, size));
    (void)troupe::schedules::trace_to_chrome_json(t);
    (void)troupe::schedules::trace_to_svg(t);
    for (const int64_t it : troupe::schedules::trace_iterations(t)) (void)troupe::schedules::trace_iteration(t, it);
  } catch (const std::exception&) {}
  return 0;
}
