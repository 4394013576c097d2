#include "apps/common/version.hpp"

#include "base/check.hpp"

// Set for this file alone by apps/CMakeLists.txt (a new commit recompiles only it).
#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif
#ifndef TROUPE_GIT_COMMIT
#define TROUPE_GIT_COMMIT "unknown"
#endif

namespace troupe::apps {

std::string version_line() { return str_cat("troupe ", TROUPE_VERSION, " (commit ", TROUPE_GIT_COMMIT, ")"); }

}  // namespace troupe::apps
