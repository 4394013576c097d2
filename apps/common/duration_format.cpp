#include "apps/common/duration_format.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace troupe::apps {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  char buf[32];
  if (s >= 86400)
    std::snprintf(buf, sizeof(buf), "%ldd%02ldh", long(s / 86400), long(s % 86400 / 3600));
  else if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", long(s / 3600), long(s % 3600 / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", long(s / 60), long(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lds", long(s));
  return buf;
}

}  // namespace troupe::apps
