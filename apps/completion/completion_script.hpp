// Shell completion scripts for `troupe`, read off the CLI11 definitions at run time (the same
// objects the command line parses and apps/common/cli_words.hpp suggests from), so a new flag or
// choice completes without anyone keeping a list:
//
//   CLI::App app{...};  add_train_command(app, run);  ...
//   std::fputs(bash_completion_script(app).c_str(), stdout);   // `troupe completion bash`
//
// What completes: the subcommands; each subcommand's flags (and the top-level ones it inherits);
// after a flag, its choices when it checks a set (CLI::IsMember), file names when it takes a
// file (CLI::ExistingFile, or any text value: most are paths), directories for CLI::ExistingDirectory,
// nothing for a number. zsh also shows each flag's and command's description.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace troupe::apps {

// What follows a flag (or what a positional argument is).
enum class CompletionValue { none, choice, file, directory, number };

struct CompletionFlag {
  std::vector<std::string> names;  // "-h", "--help"
  std::string description;
  CompletionValue value = CompletionValue::none;
  std::string type;                  // CLI11's type name without its checks: INT, FLOAT, TEXT
  std::vector<std::string> choices;  // when value == choice
};

struct CompletionCommand {
  std::string name;  // "" for the top level
  std::string description;
  std::vector<CompletionFlag> flags;        // its own, then those it inherits from the top level
  std::vector<CompletionFlag> positionals;  // names are the positional's name, e.g. "FILE"
};

// The top level first, then each visible subcommand, as the app defines them now.
std::vector<CompletionCommand> completion_commands(CLI::App& app);

std::string bash_completion_script(CLI::App& app);
std::string zsh_completion_script(CLI::App& app);

}  // namespace troupe::apps
