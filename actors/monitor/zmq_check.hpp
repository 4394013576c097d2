// The check macro for ZeroMQ calls (internal to actors/; only the monitor's sources include it).
// cppzmq reports a failed call by throwing zmq::error_t, which says what failed but not what
// for: this turns it into a troupe::Error naming the call, its purpose and the ZeroMQ reason.
//
//   TROUPE_ZMQ(socket.bind(endpoint), "cannot bind the monitor's socket to ", endpoint);
//   const std::string at = TROUPE_ZMQ(socket.get(zmq::sockopt::last_endpoint), "monitor endpoint");
#pragma once

#include <zmq.hpp>

#include <string>

#include "base/check.hpp"

namespace troupe::actors {
[[noreturn]] void fail_zmq(const zmq::error_t& e, const char* expr, const char* file, int line,
                           const std::string& hint);
}  // namespace troupe::actors

// An expression: evaluates to the call's result.
#define TROUPE_ZMQ(call, ...)                                                                             \
  ([&]() -> decltype(auto) {                                                                              \
    try {                                                                                                 \
      return call;                                                                                        \
    } catch (const zmq::error_t& troupe_zmq_) {                                                           \
      ::troupe::actors::fail_zmq(troupe_zmq_, #call, __FILE__, __LINE__, ::troupe::str_cat(__VA_ARGS__)); \
    }                                                                                                     \
  }())
