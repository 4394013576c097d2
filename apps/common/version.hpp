// What `troupe --version` prints: the release and the commit the binary was built from.
#pragma once

#include <string>

namespace troupe::apps {

// "troupe 0.1.0 (commit 2197831ab0c4)"; "commit unknown" when built outside a git checkout.
std::string version_line();

}  // namespace troupe::apps
