// How Troupe's commands show a duration: `troupe monitor`'s ETA and `troupe train`'s elapsed
// time and ETA on its log line.
//
//   format_duration(187.5);   // "3m08s"
#pragma once

#include <string>

namespace troupe::apps {

// "3d04h", "1h02m", "12m03s", "45s"; "?" for NaN, infinity or a negative number.
std::string format_duration(double seconds);

}  // namespace troupe::apps
