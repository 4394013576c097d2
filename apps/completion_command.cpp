// `troupe completion bash|zsh`: prints a completion script for the shell, generated from the
// command line's own definitions (apps/completion/completion_script.hpp), so it never goes stale.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.hpp"
#include "apps/completion/completion_script.hpp"

namespace troupe::apps {

void add_completion_command(CLI::App& app, CommandRunner& run) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("completion",
                                 "Print a bash or zsh completion script for troupe (docs/shell-completion.md says "
                                 "where to put it)");
  cmd->add_option("SHELL", *shell, "the shell: bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  // The script is written when the command runs, after every subcommand has registered.
  cmd->callback([&app, &run, shell] {
    run = [&app, shell] {
      const std::string script = *shell == "bash" ? bash_completion_script(app) : zsh_completion_script(app);
      std::fputs(script.c_str(), stdout);
      return 0;
    };
  });
}

}  // namespace troupe::apps
