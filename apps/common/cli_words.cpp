#include "apps/common/cli_words.hpp"

#include <algorithm>

namespace troupe::apps {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Every long flag name an app (and, with fallthrough, its parent) accepts.
void collect_flags(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* o : app.get_options())
    for (const std::string& name : o->get_lnames()) out.push_back("--" + name);
  if (app.get_parent() != nullptr) collect_flags(*app.get_parent(), out);
}

std::string did_you_mean(const std::string& given, const std::vector<std::string>& candidates) {
  const std::optional<std::string> best = closest_word(given, candidates);
  return best ? "; did you mean '" + *best + "'?" : "";
}

}  // namespace

std::optional<std::string> closest_word(const std::string& given, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, given.size() / 3) + 1;  // farther is not a typo
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(given, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::string unknown_words(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  const CLI::App* command = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    const std::string name = a.substr(0, a.find('='));
    if (a.rfind("--", 0) == 0) {
      const CLI::App& scope = command != nullptr ? *command : app;
      std::vector<std::string> flags;
      collect_flags(scope, flags);
      if (std::find(flags.begin(), flags.end(), name) == flags.end() && name != "--help" && name != "--version")
        return "unknown flag '" + name + "' for 'troupe" + (command ? " " + command->get_name() : std::string()) + "'" +
               did_you_mean(name, flags) + " (see --help)";
      continue;
    }
    if (command != nullptr || a.empty() || a[0] == '-') continue;  // a value, or a short flag
    // Before the command: a value of a top-level flag, or the command itself.
    if (i > 0 && args[i - 1].rfind("--", 0) == 0 && args[i - 1].find('=') == std::string::npos) continue;
    if (std::find(commands.begin(), commands.end(), a) == commands.end())
      return "unknown command '" + a + "'" + did_you_mean(a, commands) + " (commands: " + [&] {
        std::string list;
        for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
        return list;
      }() + ")";
    command = app.get_subcommand(a);
  }
  return "";
}

}  // namespace troupe::apps
