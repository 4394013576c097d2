// Config files for any subcommand, expanded into flags before CLI11 parses the line. Flags given
// on the command line win over the files.
//
// `--config FILE`: TOML, as CLI11's own config reader reads it: `key = value` lines (`# comments`,
// quoted or bare values, true/false, [a, b] lists). Keys before any section apply to the command
// being run; `[train]` starts the keys of `troupe train` (those of other commands are skipped, a
// section that names no command is an error).
//
//   num_layers = 12                  # snake_case or kebab-case: both mean --num-layers
//   [train]
//   data-path = ["0.3", "out/moby_text_document", "0.7", "out/sotu_text_document"]
//   bf16 = true
//
// `--yaml-cfg FILE`: Megatron-LM's YAML layout (megatron/training/yaml_arguments.py): a mapping
// of argument names in snake_case; a nested mapping (`language_model:`, `model_parallel:`) only
// groups its arguments; `null` leaves an argument unset.
//
// Every error names the file and line; a key that is no flag of the command is an error.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace troupe::apps {

// Replaces every "--config FILE" / "--yaml-cfg FILE" in args (args[0] is the program) by the
// file's flags, checked against the options of `app` and of the subcommand in args.
// Throws troupe::Error naming the file and line of a malformed line or an unknown key.
std::vector<std::string> expand_config_args(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace troupe::apps
