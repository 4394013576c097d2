#include "actors/train/run_error.hpp"

#include <utility>

#include "actors/actor_error.hpp"

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
  return make_sentence_error(run_error_category, code, std::move(user_message));
}

bool is_run_error(const caf::error& e) { return is_category_error(e, run_error_category); }

bool is_run_error(const caf::error& e, RunError code) { return is_category_error(e, run_error_category, code); }

void add_run_error_category(caf::actor_system_config& cfg) {
  add_sentence_category(cfg, run_error_category, "troupe error",
                        [](uint8_t code) { return to_string(static_cast<RunError>(code)); });
}

}  // namespace troupe::actors
