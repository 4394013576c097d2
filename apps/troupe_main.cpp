// `troupe`: the command line. Subcommands are registered from apps/*_command.cpp; a failure
// anywhere below (troupe::Error or any std::exception) ends as one line on stderr and exit 1.
#include <cstdio>
#include <exception>

#include "apps/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Troupe: train and serve GPT models (Megatron-LM's job, as an actor runtime)"};
  app.require_subcommand(1);
  troupe::apps::CommandRunner run;
  troupe::apps::add_preprocess_command(app, run);
  troupe::apps::add_replay_command(app, run);
  troupe::apps::add_train_command(app, run);
  CLI11_PARSE(app, argc, argv);
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: error: %s\n", e.what());
    return 1;
  }
}
