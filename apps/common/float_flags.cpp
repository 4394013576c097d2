#include "apps/common/float_flags.hpp"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

namespace troupe::apps {

namespace {

// "" when `text` is a number finite as a float (and > 0 if asked); else why not. Text that is no
// number at all passes: the option's own conversion refuses it with its usual message.
std::string float_problem(const std::string& text, bool positive, bool non_negative = false) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return "";
  if (!std::isfinite(v) || std::fabs(v) > double(FLT_MAX))
    return "got " + text + ", which is not a finite number (as a 32-bit float); give a finite value";
  if (positive && !(v > 0)) return "got " + text + ", must be > 0";
  if (non_negative && !(v >= 0)) return "got " + text + ", must be >= 0";
  return "";
}

}  // namespace

CLI::Validator finite_float() {
  return CLI::Validator([](std::string& text) { return float_problem(text, false); }, "FINITE", "finite float");
}

CLI::Validator positive_finite_float() {
  return CLI::Validator([](std::string& text) { return float_problem(text, true); }, "POSITIVE",
                        "positive finite float");
}

CLI::Validator non_negative_finite_float() {
  return CLI::Validator([](std::string& text) { return float_problem(text, false, true); }, "NONNEGATIVE",
                        "non-negative finite float");
}

}  // namespace troupe::apps
