// `troupe`: the command line. Subcommands are registered from apps/*_command.cpp; a failure
// anywhere below (troupe::Error or any std::exception) ends as one line on stderr.
// `--log-level` (anywhere on the line) sets the level of every logger (base/log.hpp).
// Exit codes (docs/troubleshooting.md): 0 success, 1 the work failed, 2 the command line is wrong.
#include <exception>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common/cli_words.hpp"
#include "apps/common/config_file.hpp"
#include "apps/common/version.hpp"
#include "base/log.hpp"

namespace {
constexpr int kExitFailure = 1, kExitUsage = 2;
}

int main(int argc, char** argv) {
  CLI::App app{"Troupe: train and serve GPT models (Megatron-LM's job, as an actor runtime)", "troupe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", troupe::apps::version_line(), "print the version and commit, then exit");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "log level: trace, debug, info, warning or error (default info)");
  app.fallthrough();  // `troupe train --log-level debug ...` as well as `troupe --log-level debug train ...`
  troupe::apps::CommandRunner run;
  troupe::apps::add_completion_command(app, run);
  troupe::apps::add_convert_command(app, run);
  troupe::apps::add_generate_command(app, run);
  troupe::apps::add_monitor_command(app, run);
  troupe::apps::add_preprocess_command(app, run);
  troupe::apps::add_replay_command(app, run);
  troupe::apps::add_serve_command(app, run);
  troupe::apps::add_train_command(app, run);
  try {
    std::vector<std::string> args = troupe::apps::expand_config_args(app, std::vector<std::string>(argv, argv + argc));
    args.erase(args.begin());  // CLI11 wants the arguments without the program,
    if (args.empty()) {
      std::fputs(app.help().c_str(), stderr);
      return kExitUsage;
    }
    const std::string unknown = troupe::apps::unknown_words(app, args);
    if (!unknown.empty()) {
      troupe::logger("troupe").error(unknown);
      return kExitUsage;
    }
    std::reverse(args.begin(), args.end());  // last first
    app.parse(args);
    troupe::set_log_level(troupe::parse_log_level(log_level));
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, the version, or the error
    return code == 0 ? 0 : kExitUsage;
  } catch (const std::exception& e) {
    troupe::logger("troupe").error(e.what());
    return kExitUsage;
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    troupe::logger("troupe").error(e.what());
    return kExitFailure;
  }
}
