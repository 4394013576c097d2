#include "apps/common/config_file.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "base/check.hpp"

namespace troupe::apps {

namespace {

// One setting of a config file: the key as written, its values, where it was written.
struct Setting {
  std::string key;
  std::vector<std::string> values;  // {"true"} / {"false"} for booleans
  std::string where;                // "file:line"
};

// The options a config file may set: the subcommand's, then the program's own.
struct OptionScope {
  const CLI::App& app;
  const CLI::App* command = nullptr;

  const CLI::Option* find(const std::string& key) const {
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');  // snake_case and kebab-case alike
    const std::string flag = "--" + (name.rfind("--", 0) == 0 ? name.substr(2) : name);
    const CLI::Option* opt = command != nullptr ? command->get_option_no_throw(flag) : nullptr;
    return opt != nullptr ? opt : app.get_option_no_throw(flag);
  }
};

// The subcommand of `app` called `name`, or null.
const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  if (name.empty()) return nullptr;  // option groups are nameless subcommands
  const auto found = app.get_subcommands([&](const CLI::App* sub) { return sub->get_name() == name; });
  return found.empty() ? nullptr : found.front();
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string unquote(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
}

// `value` without a trailing `# comment` (a '#' inside quotes is kept).
std::string strip_comment(const std::string& value) {
  char quote = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      return trim(value.substr(0, i));
    }
  }
  return value;
}

// The value of a `key = value` line: one item, or the items of a [a, b] list.
std::vector<std::string> toml_values(const std::string& value, const std::string& where) {
  if (value.front() != '[') return {unquote(value)};
  TROUPE_CHECK(value.back() == ']', where, ": unterminated list '", value, "'; close it with ']' on the same line");
  const std::string items = value.substr(1, value.size() - 2);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= items.size()) {
    const size_t comma = items.find(',', start);
    const std::string item = trim(items.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!item.empty()) out.push_back(unquote(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The settings of a TOML file for `command` ("" when none is named on the line).
std::vector<Setting> read_toml(const std::string& path, const OptionScope& scope) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "cannot open config file '", path, "'; check the path given to --config");
  const std::string command = scope.command != nullptr ? scope.command->get_name() : "";
  std::vector<Setting> out;
  std::string line;
  int line_no = 0;
  bool in_scope = true;  // keys before any section apply to the command being run
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (t[0] == '[') {
      TROUPE_CHECK(t.back() == ']', where, ": malformed section header '", t, "'; write [command]");
      const std::string section = trim(t.substr(1, t.size() - 2));
      const bool known = find_subcommand(scope.app, section) != nullptr;
      TROUPE_CHECK(known, where, ": section [", section, "] is not a troupe command; name one (e.g. [train])");
      in_scope = section == command;
      continue;
    }
    const size_t eq = t.find('=');
    TROUPE_CHECK(eq != std::string::npos, where, ": expected `key = value`, got '", t, "'");
    const std::string key = trim(t.substr(0, eq)), value = strip_comment(trim(t.substr(eq + 1)));
    TROUPE_CHECK(!key.empty() && !value.empty(), where, ": expected `key = value`, got '", t, "'");
    if (in_scope) out.push_back({key, toml_values(value, where), where});
  }
  return out;
}

std::string yaml_where(const std::string& path, const YAML::Node& node) {
  return path + ":" + std::to_string(node.Mark().line + 1);
}

// Megatron's YAML: nested mappings group arguments; their keys are the arguments.
void collect_yaml(const std::string& path, const YAML::Node& mapping, std::vector<Setting>& out, int depth = 0) {
  for (const auto& kv : mapping) {
    const std::string where = yaml_where(path, kv.first);
    TROUPE_CHECK(kv.first.IsScalar(), where, ": expected an argument name as the key");
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (v.IsMap()) {
      // Bounded: an alias may point back at its own mapping.
      TROUPE_CHECK(depth < 8, where, ": '", key, "' nests mappings too deep; Megatron's layout uses one level");
      collect_yaml(path, v, out, depth + 1);
    } else if (v.IsNull()) {
      continue;  // Megatron's "not set"
    } else if (bool b = false; v.IsScalar() && v.Tag() != "!" && YAML::convert<bool>::decode(v, b)) {
      out.push_back({key, {b ? "true" : "false"}, where});  // YAML's True, yes, on, ...
    } else if (v.IsScalar()) {
      out.push_back({key, {v.Scalar()}, where});
    } else {
      std::vector<std::string> items;
      for (const auto& item : v) {
        TROUPE_CHECK(item.IsScalar(), yaml_where(path, item), ": the list of '", key, "' may hold only plain values");
        items.push_back(item.Scalar());
      }
      out.push_back({key, items, where});
    }
  }
}

std::vector<Setting> read_yaml(const std::string& path) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "cannot open config file '", path, "'; check the path given to --yaml-cfg");
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    TROUPE_FAIL(path, ":", e.mark.line + 1, ": not valid YAML (", e.msg, ")");
  }
  std::vector<Setting> out;
  if (root.IsNull()) return out;
  TROUPE_CHECK(root.IsMap(), yaml_where(path, root), ": expected a mapping of argument names (Megatron's --yaml-cfg)");
  collect_yaml(path, root, out);
  return out;
}

// The subcommand the line runs: the first word that is a subcommand of `app`.
const CLI::App* find_command(const CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i].rfind('-', 0) != 0)
      if (const CLI::App* sub = find_subcommand(app, args[i])) return sub;
  return nullptr;
}

bool is_config_flag(const std::string& a) {
  return a == "--config" || a == "--yaml-cfg" || a.rfind("--config=", 0) == 0 || a.rfind("--yaml-cfg=", 0) == 0;
}

}  // namespace

std::vector<std::string> expand_config_args(const CLI::App& app, const std::vector<std::string>& args) {
  const OptionScope scope{app, find_command(app, args)};
  std::set<const CLI::Option*> given;  // options on the command line itself
  for (const auto& a : args)
    if (a.rfind("--", 0) == 0 && !is_config_flag(a))
      if (const CLI::Option* opt = scope.find(a.substr(0, a.find('=')))) given.insert(opt);
  std::vector<std::string> out;
  std::set<const CLI::Option*> from_files;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_config_flag(args[i])) {
      out.push_back(args[i]);
      continue;
    }
    const bool yaml = args[i].rfind("--yaml-cfg", 0) == 0;
    const size_t eq = args[i].find('=');
    std::string path;
    if (eq == std::string::npos) {
      TROUPE_CHECK(i + 1 < args.size(), args[i], " needs a file");
      path = args[++i];
    } else {
      path = args[i].substr(eq + 1);
    }
    for (const Setting& s : yaml ? read_yaml(path) : read_toml(path, scope)) {
      const CLI::Option* opt = scope.find(s.key);
      TROUPE_CHECK(opt != nullptr, s.where, ": unknown key '", s.key, "'",
                   scope.command != nullptr ? " for `troupe " + scope.command->get_name() + "`" : std::string(),
                   "; see the command's --help for its flags");
      TROUPE_CHECK(from_files.insert(opt).second, s.where, ": '", s.key,
                   "' is set twice in the config files; keep one");
      if (given.count(opt) != 0) continue;
      const std::string flag = opt->get_lnames().empty() ? "--" + s.key : "--" + opt->get_lnames().front();
      const bool is_flag = opt->get_expected_max() == 0;  // add_flag: takes no value
      if (is_flag && s.values.size() == 1 && (s.values[0] == "true" || s.values[0] == "false")) {
        if (s.values[0] == "true") out.push_back(flag);
        continue;
      }
      TROUPE_CHECK(!s.values.empty(), s.where, ": '", s.key, "' has an empty list; give a value or drop the line");
      out.push_back(flag);
      out.insert(out.end(), s.values.begin(), s.values.end());
    }
  }
  return out;
}

}  // namespace troupe::apps
