#include "actors/train/run_error.hpp"

#include <utility>

namespace troupe::actors {

std::string to_string(RunError code) {
  switch (code) {
    case RunError::stage_failed:
      return "stage_failed";
    case RunError::timeout:
      return "timeout";
    case RunError::data:
      return "data";
    case RunError::optimizer:
      return "optimizer";
    case RunError::reduction:
      return "reduction";
    case RunError::stopped:
      return "stopped";
    case RunError::rejected:
      return "rejected";
  }
  return "unknown";
}

caf::error make_run_error(RunError code, std::string user_message) {
  return caf::error(static_cast<uint8_t>(code), run_error_category, caf::make_message(std::move(user_message)));
}

bool is_run_error(const caf::error& e) { return e && e.category() == run_error_category; }

bool is_run_error(const caf::error& e, RunError code) {
  return is_run_error(e) && e.code() == static_cast<uint8_t>(code);
}

void add_run_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(run_error_category, [](uint8_t code, caf::atom_value, const caf::message& context) {
    if (context.match_elements<std::string>()) return context.get_as<std::string>(0);
    // Made without a sentence (not by make_run_error): at least say what failed.
    return "troupe error: " + to_string(static_cast<RunError>(code));
  });
}

}  // namespace troupe::actors
