// The training run's failures as caf::error: a category of our own ("troupe"), a code saying
// which part of the run failed, and as context the one sentence a user reads. The actors
// answer requests and end with these errors; whoever reports one renders it through the actor
// system, which gives back that sentence (once add_run_error_category registered the
// renderer on the system's config; anything else renders as CAF renders it).
//
//   caf::actor_system_config cfg;
//   add_run_error_category(cfg);
//   caf::actor_system system{cfg};
//   ...
//   return make_run_error(RunError::data, "data loader: the training data ran out after 16 samples");
//   ...
//   system.render(e);                  // "data loader: the training data ran out after 16 samples"
//   is_run_error(e, RunError::data);   // true
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>

namespace troupe::actors {

// Codes start at 1: a caf::error with code 0 is no error.
enum class RunError : uint8_t {
  stage_failed = 1,  // a stage's op, its optimizer update or its part of a reduction threw
  timeout,           // the watchdog: a stage ran one op, or the whole pipeline was silent, past op_timeout
  data,              // the data loader could not deliver (data ran out, no loader, every target ignored)
  optimizer,         // the optimizer step (a stage's update failed)
  reduction,         // a gradient reducer's collective, or summing an iteration's results over processes
  stopped,           // an actor of the run went down
  rejected,          // a request the trainer cannot take now (an iteration is running, the run failed)
};

// "stage_failed", "timeout", ...
std::string to_string(RunError code);

// The error category's atom (at most 10 characters).
inline constexpr caf::atom_value run_error_category = caf::atom("troupe");

// An error of the category, carrying `user_message` (one sentence, as the user will read it).
caf::error make_run_error(RunError code, std::string user_message);

// Is `e` an error of the category (with that code)?
bool is_run_error(const caf::error& e);
bool is_run_error(const caf::error& e, RunError code);

// Registers the renderer: system.render(e) gives the error's sentence.
void add_run_error_category(caf::actor_system_config& cfg);

}  // namespace troupe::actors
