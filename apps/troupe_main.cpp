// `troupe`: the command line. Subcommands are registered from apps/*_command.cpp; a failure
// anywhere below (troupe::Error or any std::exception) ends as one line on stderr and exit 1.
#include <cstdio>
#include <exception>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common/config_file.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Troupe: train and serve GPT models (Megatron-LM's job, as an actor runtime)"};
  app.require_subcommand(1);
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
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: error: %s\n", e.what());
    return 2;
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: error: %s\n", e.what());
    return 1;
  }
}
