// The project's own caf::error categories (RunError in actors/train, ServeError in
// actors/serve) share one shape: an enum of codes starting at 1, an atom naming the category,
// and, in the error's context, the one sentence the user reads. These helpers are that shape;
// each category wraps them with its enum. Also: the text of the exception an actor's
// exception handler was handed.
//
//   caf::error e = make_sentence_error(run_error_category, RunError::data, "the data ran out");
//   add_sentence_category(cfg, run_error_category, "troupe error", [](uint8_t c) { ... });
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>

namespace troupe::actors {

template <typename Code>
caf::error make_sentence_error(caf::atom_value category, Code code, std::string sentence) {
  return caf::error(static_cast<uint8_t>(code), category, caf::make_message(std::move(sentence)));
}

inline bool is_category_error(const caf::error& e, caf::atom_value category) { return e && e.category() == category; }

template <typename Code>
bool is_category_error(const caf::error& e, caf::atom_value category, Code code) {
  return is_category_error(e, category) && e.code() == static_cast<uint8_t>(code);
}

// Registers the category's renderer: system.render(e) gives the error's sentence, or (an
// error made without one) "<fallback>: <code name>".
inline void add_sentence_category(caf::actor_system_config& cfg, caf::atom_value category, std::string fallback,
                                  std::function<std::string(uint8_t)> code_name) {
  cfg.add_error_category(category, [fallback = std::move(fallback), code_name = std::move(code_name)](
                                       uint8_t code, caf::atom_value, const caf::message& context) {
    if (context.match_elements<std::string>()) return context.get_as<std::string>(0);
    return fallback + ": " + code_name(code);
  });
}

// What an exception handler (scheduled_actor::set_exception_handler) was handed, as text.
inline std::string exception_text(const std::exception_ptr& eptr) {
  try {
    std::rethrow_exception(eptr);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace troupe::actors
