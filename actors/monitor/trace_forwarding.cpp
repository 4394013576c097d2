#include "actors/monitor/trace_forwarding.hpp"

namespace troupe::actors {

bool TraceQueue::try_push(int64_t n) {
  if (queued_.fetch_add(n, std::memory_order_relaxed) + n <= capacity_) return true;
  queued_.fetch_sub(n, std::memory_order_relaxed);
  dropped_.fetch_add(n, std::memory_order_relaxed);
  return false;
}

}  // namespace troupe::actors
