#include "actors/monitor/zmq_check.hpp"

namespace troupe::actors {

void fail_zmq(const zmq::error_t& e, const char* expr, const char* file, int line, const std::string& hint) {
  fail("zmq", expr, file, line, str_cat(hint, hint.empty() ? "" : ": ", e.what()));
}

}  // namespace troupe::actors
