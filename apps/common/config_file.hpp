// `--config FILE` for any subcommand: FILE holds `key = value` lines (a TOML subset:
// `# comments`, quoted or bare values, true/false, [a, b] lists; [section] lines are ignored),
// each standing for the flag `--key`. Flags given on the command line win over the file.
//
//   num-layers = 12
//   data-path = ["0.3", "out/moby_text_document", "0.7", "out/sotu_text_document"]
//   bf16 = true
#pragma once

#include <string>
#include <vector>

namespace troupe::apps {

// Replaces every "--config FILE" in args (args[0] is the program) by the file's flags.
// Throws troupe::Error naming the file and line of a malformed line.
std::vector<std::string> expand_config_args(const std::vector<std::string>& args);

}  // namespace troupe::apps
