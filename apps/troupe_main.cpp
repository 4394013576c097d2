// `troupe`: the command line. Subcommands are registered from apps/*_command.cpp; a failure
// anywhere below (troupe::Error or any std::exception) ends as one line on stderr and exit 1.
// `--log-level` (anywhere on the line) sets the level of every logger (base/log.hpp).
#include <exception>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common/config_file.hpp"
#include "base/log.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Troupe: train and serve GPT models (Megatron-LM's job, as an actor runtime)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "log level: trace, debug, info, warning or error (default info)");
  app.fallthrough();  // `troupe train --log-level debug ...` as well as `troupe --log-level debug train ...`
  troupe::apps::CommandRunner run;
  troupe::apps::add_convert_command(app, run);
  troupe::apps::add_generate_command(app, run);
  troupe::apps::add_monitor_command(app, run);
  troupe::apps::add_preprocess_command(app, run);
  troupe::apps::add_replay_command(app, run);
  troupe::apps::add_serve_command(app, run);
  troupe::apps::add_train_command(app, run);
  try {
    std::vector<std::string> args = troupe::apps::expand_config_args(std::vector<std::string>(argv, argv + argc));
    args.erase(args.begin());                // CLI11 wants the arguments without the program,
    std::reverse(args.begin(), args.end());  // last first
    app.parse(args);
    troupe::set_log_level(troupe::parse_log_level(log_level));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    troupe::logger("troupe").error(e.what());
    return 2;
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    troupe::logger("troupe").error(e.what());
    return 1;
  }
}
