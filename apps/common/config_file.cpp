#include "apps/common/config_file.hpp"

#include <fstream>
#include <set>

#include "base/check.hpp"

namespace troupe::apps {

namespace {

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

// The flags of one config line ("--key", values...), empty for `key = false`.
std::vector<std::string> line_flags(const std::string& path, int line_no, const std::string& line) {
  const size_t eq = line.find('=');
  TROUPE_CHECK(eq != std::string::npos, path, ":", line_no, ": expected `key = value`, got '", line, "'");
  const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
  TROUPE_CHECK(!key.empty() && !value.empty(), path, ":", line_no, ": expected `key = value`, got '", line, "'");
  const std::string flag = "--" + (key.rfind("--", 0) == 0 ? key.substr(2) : key);
  if (value == "true") return {flag};
  if (value == "false") return {};
  std::vector<std::string> out{flag};
  if (value.front() == '[') {
    TROUPE_CHECK(value.back() == ']', path, ":", line_no, ": unterminated list");
    const std::string items = value.substr(1, value.size() - 2);
    size_t start = 0;
    while (start <= items.size()) {
      const size_t comma = items.find(',', start);
      const std::string item =
          trim(items.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!item.empty()) out.push_back(unquote(item));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  out.push_back(unquote(value));
  return out;
}

}  // namespace

std::vector<std::string> expand_config_args(const std::vector<std::string>& args) {
  std::set<std::string> given;  // flags on the command line itself
  for (const auto& a : args)
    if (a.rfind("--", 0) == 0) given.insert(a.substr(0, a.find('=')));
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--config" && args[i].rfind("--config=", 0) != 0) {
      out.push_back(args[i]);
      continue;
    }
    std::string path;
    if (args[i] == "--config") {
      TROUPE_CHECK(i + 1 < args.size(), "--config needs a file");
      path = args[++i];
    } else {
      path = args[i].substr(9);
    }
    std::ifstream in(path);
    TROUPE_CHECK(in.good(), "cannot open config file ", path);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const std::string t = trim(line);
      if (t.empty() || t[0] == '#' || t[0] == '[') continue;
      std::vector<std::string> flags = line_flags(path, line_no, t);
      if (flags.empty() || given.count(flags[0])) continue;
      out.insert(out.end(), flags.begin(), flags.end());
    }
  }
  return out;
}

}  // namespace troupe::apps
