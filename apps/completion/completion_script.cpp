#include "apps/completion/completion_script.hpp"

#include <algorithm>
#include <sstream>

namespace troupe::apps {

namespace {

// "{a,b,c}", CLI::IsMember's description, as its members; empty for any other check.
std::vector<std::string> set_members(const std::string& description) {
  std::vector<std::string> out;
  if (description.size() < 2 || description.front() != '{' || description.back() != '}') return out;
  std::stringstream in(description.substr(1, description.size() - 2));
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

CompletionFlag describe_option(CLI::Option& o) {
  CompletionFlag f;
  for (const std::string& s : o.get_snames()) f.names.push_back("-" + s);
  for (const std::string& l : o.get_lnames()) f.names.push_back("--" + l);
  if (f.names.empty()) f.names.push_back(o.get_name());  // a positional
  f.description = o.get_description();
  std::replace(f.description.begin(), f.description.end(), '\n', ' ');
  if (o.get_expected_max() == 0) return f;  // a flag without a value
  const std::string full_type = o.get_type_name();
  f.type = full_type.substr(0, full_type.find(':'));
  f.value = f.type == "TEXT" ? CompletionValue::file : CompletionValue::number;
  // The checks CLI11 keeps on the option (IsMember, ExistingFile, ...), in no promised order.
  for (int i = 0;; ++i) {
    CLI::Validator* check = nullptr;
    try {
      check = o.get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    const std::string description = check->get_description();
    if (std::vector<std::string> members = set_members(description); !members.empty()) {
      f.value = CompletionValue::choice;
      f.choices = std::move(members);
      break;
    }
    if (description == "DIR") f.value = CompletionValue::directory;
    if (description == "FILE" || description.rfind("PATH", 0) == 0) f.value = CompletionValue::file;
  }
  return f;
}

bool visible(const CLI::Option& o) { return !o.get_group().empty(); }  // CLI11 hides group ""

CompletionCommand describe_app(CLI::App& app) {
  CompletionCommand c;
  c.name = app.get_parent() != nullptr ? app.get_name() : "";
  c.description = app.get_description();
  for (CLI::Option* o : app.get_options([](CLI::Option* o) { return visible(*o); }))
    (o->nonpositional() ? c.flags : c.positionals).push_back(describe_option(*o));
  if (CLI::App* parent = app.get_parent(); parent != nullptr)  // fallthrough: `troupe train --log-level debug`
    for (CLI::Option* o : parent->get_options([](CLI::Option* o) { return visible(*o) && o->nonpositional(); }))
      if (o != parent->get_help_ptr()) c.flags.push_back(describe_option(*o));
  return c;
}

// `text` as one single-quoted shell word (bash and zsh).
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string joined(const std::vector<std::string>& words, const std::string& separator = " ") {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

// The bash statement that completes `$cur` as a value of kind `f`.
std::string bash_value_completion(const CompletionFlag& f) {
  switch (f.value) {
    case CompletionValue::choice:
      return "COMPREPLY=($(compgen -W " + quoted(joined(f.choices)) + " -- \"$cur\"))";
    case CompletionValue::file:
      return "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\"))";
    case CompletionValue::directory:
      return "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\"))";
    default:
      return "COMPREPLY=()";  // a number: nothing to offer
  }
}

// zsh's _arguments action for a value of kind `f`.
std::string zsh_action(const CompletionFlag& f) {
  switch (f.value) {
    case CompletionValue::choice:
      return "(" + joined(f.choices) + ")";
    case CompletionValue::file:
      return "_files";
    case CompletionValue::directory:
      return "_files -/";
    default:
      return " ";
  }
}

// Brackets end an _arguments explanation; a backslash keeps them in it.
std::string zsh_explanation(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '[' || ch == ']' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

// "train" -> "_troupe_train" ("-" is no problem in zsh names, but keep them plain).
std::string zsh_function(const std::string& command) {
  std::string name = "_troupe_" + command;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

void zsh_argument_specs(const CompletionCommand& c, std::ostringstream& out) {
  for (const CompletionFlag& f : c.flags)
    for (const std::string& name : f.names) {
      const std::string explanation = "[" + zsh_explanation(f.description) + "]";
      if (f.value == CompletionValue::none)
        out << "    " << quoted(name + explanation) << " \\\n";
      else  // `--flag=` takes the value as `--flag value` or `--flag=value`
        out << "    " << quoted(name + "=" + explanation + ":" + f.type + ":" + zsh_action(f)) << " \\\n";
    }
}

}  // namespace

std::vector<CompletionCommand> completion_commands(CLI::App& app) {
  std::vector<CompletionCommand> out = {describe_app(app)};
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_group().empty(); }))
    out.push_back(describe_app(*sub));
  return out;
}

std::string bash_completion_script(CLI::App& app) {
  const std::vector<CompletionCommand> commands = completion_commands(app);
  std::vector<std::string> names;
  for (size_t i = 1; i < commands.size(); ++i) names.push_back(commands[i].name);
  std::ostringstream out;
  out << "# bash completion for troupe, written by `troupe completion bash` from the flags and choices\n"
         "# troupe itself parses. Install (docs/shell-completion.md):\n"
         "#   troupe completion bash > ~/.local/share/bash-completion/completions/troupe\n"
         "_troupe_complete() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"\" cmd=\"\" i words flags arguments\n"
         "  ((COMP_CWORD > 0)) && prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  # --flag=value: bash splits the word at '=' (COMP_WORDBREAKS)\n"
         "  if [[ \"$cur\" == \"=\" ]]; then\n"
         "    cur=\"\"\n"
         "  elif [[ \"$prev\" == \"=\" ]] && ((COMP_CWORD > 1)); then\n"
         "    prev=\"${COMP_WORDS[COMP_CWORD-2]}\"\n"
         "  fi\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case \"${COMP_WORDS[i]}\" in\n"
         "      "
      << joined(names, "|")
      << ") cmd=\"${COMP_WORDS[i]}\"; break ;;\n"
         "    esac\n"
         "  done\n"
         "  # the value of the flag before the cursor\n"
         "  case \"$cmd $prev\" in\n";
  for (const CompletionCommand& c : commands)
    for (const CompletionFlag& f : c.flags) {
      if (f.value == CompletionValue::none) continue;
      std::vector<std::string> patterns;
      for (const std::string& name : f.names) patterns.push_back(quoted(c.name + " " + name));
      out << "    " << joined(patterns, "|") << ") " << bash_value_completion(f) << "; return 0 ;;\n";
    }
  out << "  esac\n"
         "  case \"$cmd\" in\n";
  for (const CompletionCommand& c : commands) {
    std::vector<std::string> flags, arguments;  // arguments: the commands, or a positional's choices
    for (const CompletionFlag& f : c.flags) flags.insert(flags.end(), f.names.begin(), f.names.end());
    if (c.name.empty()) arguments = names;
    std::string files;  // a positional that takes a file: file names unless a flag is being typed
    for (const CompletionFlag& p : c.positionals) {
      if (p.value == CompletionValue::choice) arguments.insert(arguments.end(), p.choices.begin(), p.choices.end());
      if (p.value == CompletionValue::file || p.value == CompletionValue::directory)
        files = "      if [[ \"$cur\" != -* ]]; then " + bash_value_completion(p) + "; return 0; fi\n";
    }
    out << "    " << quoted(c.name) << ")\n"
        << files << "      flags=" << quoted(joined(flags)) << " arguments=" << quoted(joined(arguments)) << " ;;\n";
  }
  out << "  esac\n"
         "  words=\"$flags\"\n"
         "  [[ \"$cur\" != -* && -n \"$arguments\" ]] && words=\"$arguments\"\n"
         "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "}\n"
         "complete -F _troupe_complete troupe\n";
  return out.str();
}

std::string zsh_completion_script(CLI::App& app) {
  const std::vector<CompletionCommand> commands = completion_commands(app);
  std::ostringstream out;
  out << "#compdef troupe\n"
         "# zsh completion for troupe, written by `troupe completion zsh` from the flags, choices and\n"
         "# descriptions troupe itself parses. Install (docs/shell-completion.md): save it as _troupe in a\n"
         "# folder on $fpath, e.g.\n"
         "#   mkdir -p ~/.zfunc && troupe completion zsh > ~/.zfunc/_troupe\n"
         "#   and in ~/.zshrc, before compinit: fpath=(~/.zfunc $fpath)\n\n";
  for (size_t i = 1; i < commands.size(); ++i) {
    const CompletionCommand& c = commands[i];
    out << zsh_function(c.name) << "() {\n  _arguments -s \\\n";
    zsh_argument_specs(c, out);
    for (size_t p = 0; p < c.positionals.size(); ++p)
      out << "    "
          << quoted(std::to_string(p + 1) + ":" + c.positionals[p].names[0] + ":" + zsh_action(c.positionals[p]))
          << " \\\n";
    out << "    && return 0\n}\n\n";
  }
  out << "_troupe() {\n"
         "  local curcontext=\"$curcontext\" state line\n"
         "  typeset -A opt_args\n"
         "  _arguments -C \\\n";
  zsh_argument_specs(commands[0], out);
  out << "    '1: :->command' \\\n"
         "    '*:: :->args' \\\n"
         "    && return 0\n"
         "  case $state in\n"
         "    command)\n"
         "      local -a commands\n"
         "      commands=(\n";
  for (size_t i = 1; i < commands.size(); ++i)
    out << "        " << quoted(commands[i].name + ":" + commands[i].description) << "\n";
  out << "      )\n"
         "      _describe -t commands 'troupe command' commands ;;\n"
         "    args)\n"
         "      case $words[1] in\n";
  for (size_t i = 1; i < commands.size(); ++i)
    out << "        " << commands[i].name << ") " << zsh_function(commands[i].name) << " ;;\n";
  out << "      esac ;;\n"
         "  esac\n"
         "}\n\n"
         "# Autoloaded from $fpath, or sourced: `source <(troupe completion zsh)` after compinit.\n"
         "if [[ \"${funcstack[1]}\" == _troupe ]]; then\n"
         "  _troupe \"$@\"\n"
         "else\n"
         "  compdef _troupe troupe\n"
         "fi\n";
  return out.str();
}

}  // namespace troupe::apps
