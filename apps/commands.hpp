// The `troupe` subcommands. Each lives in apps/<name>_command.cpp and registers itself on the
// top-level CLI11 app; when the command line selects it, its callback stores in `run` the work
// that main() then performs (inside main's error handling) and whose result is the exit code.
//
//   void add_preprocess_command(CLI::App& app, CommandRunner& run) {
//     auto* cmd = app.add_subcommand("preprocess", "...");
//     auto opts = std::make_shared<Options>();          // flags bind into it
//     cmd->callback([&run, opts] { run = [opts] { return preprocess(*opts); }; });
//   }
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace troupe::apps {

// Set by a subcommand's callback; main() returns what it returns.
using CommandRunner = std::function<int()>;

void add_completion_command(CLI::App& app, CommandRunner& run);
void add_convert_command(CLI::App& app, CommandRunner& run);
void add_generate_command(CLI::App& app, CommandRunner& run);
void add_monitor_command(CLI::App& app, CommandRunner& run);
void add_preprocess_command(CLI::App& app, CommandRunner& run);
void add_replay_command(CLI::App& app, CommandRunner& run);
void add_serve_command(CLI::App& app, CommandRunner& run);
void add_train_command(CLI::App& app, CommandRunner& run);

}  // namespace troupe::apps
