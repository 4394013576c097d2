#include "actors/serve/serve_error.hpp"

#include <utility>

#include "actors/actor_error.hpp"

namespace troupe::actors {

std::string to_string(ServeError code) {
  switch (code) {
    case ServeError::rejected:
      return "rejected";
    case ServeError::worker_failed:
      return "worker_failed";
    case ServeError::out_of_service:
      return "out_of_service";
  }
  return "unknown";
}

caf::error make_serve_error(ServeError code, std::string user_message) {
  return make_sentence_error(serve_error_category, code, std::move(user_message));
}

bool is_serve_error(const caf::error& e) { return is_category_error(e, serve_error_category); }

bool is_serve_error(const caf::error& e, ServeError code) { return is_category_error(e, serve_error_category, code); }

void add_serve_error_category(caf::actor_system_config& cfg) {
  add_sentence_category(cfg, serve_error_category, "inference pool error",
                        [](uint8_t code) { return to_string(static_cast<ServeError>(code)); });
}

}  // namespace troupe::actors
