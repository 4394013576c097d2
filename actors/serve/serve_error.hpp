// The inference pool's failures as caf::error: a category of our own ("serve"), a code saying
// what failed, and as context the one sentence the HTTP caller reads (the APIs put it in their
// 400 answer or the stream's error event). The router and the workers end a request with one
// of these; InferencePool renders it through its actor system, where add_serve_error_category
// registered the renderer, and hands the sentence to the request's RequestError.
//
//   caf::actor_system_config cfg;
//   add_serve_error_category(cfg);
//   caf::actor_system system{cfg};
//   ...
//   caf::error e = make_serve_error(ServeError::rejected, "the prompt is empty");
//   system.render(e);                              // "the prompt is empty"
//   is_serve_error(e, ServeError::rejected);       // true
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>

namespace troupe::actors {

// Codes start at 1: a caf::error with code 0 is no error.
enum class ServeError : uint8_t {
  rejected = 1,    // the worker's engine refused the request (an empty prompt, one too long, ...)
  worker_failed,   // the worker's engine step failed (a device error): every request it ran ends so
  out_of_service,  // the request's replica left service (a failed tensor-parallel group), or every one did
};

// "rejected", "worker_failed", ...
std::string to_string(ServeError code);

// The error category's atom (at most 10 characters).
inline constexpr caf::atom_value serve_error_category = caf::atom("serve");

// An error of the category, carrying `user_message` (one sentence, as the HTTP caller will read it).
caf::error make_serve_error(ServeError code, std::string user_message);

// Is `e` an error of the category (with that code)?
bool is_serve_error(const caf::error& e);
bool is_serve_error(const caf::error& e, ServeError code);

// Registers the renderer: system.render(e) gives the error's sentence.
void add_serve_error_category(caf::actor_system_config& cfg);

}  // namespace troupe::actors
