#include "apps/train/restart_plan.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "storage/checkpoint_catalog.hpp"
#include "storage/checkpoint_format.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

namespace {

fs::path metadata_path(const std::string& root, int64_t iteration) {
  return fs::path(root) / checkpoint_iteration_dir_name(iteration) / kCheckpointMetadataName;
}

// The options of `cmd` that `names` name; an unknown name is a programming error.
std::vector<const CLI::Option*> options_named(const CLI::App& cmd, const std::vector<std::string>& names) {
  std::vector<const CLI::Option*> out;
  for (const std::string& name : names) {
    const CLI::Option* opt = cmd.get_option_no_throw(name);
    TROUPE_CHECK(opt != nullptr, "restart_plan: `troupe ", cmd.get_name(), "` has no option ", name);
    out.push_back(opt);
  }
  return out;
}

// The option of `cmd` that the word `arg` gives ("--name" or "--name=VALUE"), or null.
const CLI::Option* option_of(const std::string& arg, const CLI::App& cmd) {
  if (arg.rfind("--", 0) != 0 || arg.size() == 2) return nullptr;
  return cmd.get_option_no_throw(arg.substr(0, arg.find('=')));
}

}  // namespace

SaveDirSnapshot snapshot_save_dir(const std::string& root) {
  SaveDirSnapshot s{.root = root, .held_checkpoints = holds_checkpoints(root), .complete = {}};
  for (int64_t it : checkpoint_iterations(root)) {
    std::error_code ec;
    const fs::file_time_type t = fs::last_write_time(metadata_path(root, it), ec);
    if (!ec) s.complete[it] = t;  // no metadata.json: not complete
  }
  return s;
}

std::optional<int64_t> newest_intact_checkpoint_since(const SaveDirSnapshot& before) {
  const std::vector<int64_t> its = checkpoint_iterations(before.root);
  for (auto it = its.rbegin(); it != its.rend(); ++it) {  // newest first: stops at the first good one
    std::error_code ec;
    const fs::file_time_type t = fs::last_write_time(metadata_path(before.root, *it), ec);
    if (ec) continue;  // incomplete
    const auto old = before.complete.find(*it);
    if (old != before.complete.end() && old->second == t) continue;  // there before this run started
    if (checkpoint_defect(before.root, *it).empty()) return *it;
  }
  return std::nullopt;
}

std::vector<std::string> without_options(const std::vector<std::string>& args, const CLI::App& cmd,
                                         const std::vector<std::string>& names) {
  const std::vector<const CLI::Option*> drop = options_named(cmd, names);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const CLI::Option* opt = i == 0 ? nullptr : option_of(args[i], cmd);
    if (opt == nullptr || std::find(drop.begin(), drop.end(), opt) == drop.end()) {
      out.push_back(args[i]);
      continue;
    }
    // "--name VALUE": skip the value words too (none for a flag or "--name=VALUE").
    if (args[i].find('=') == std::string::npos && opt->get_expected_max() != 0)
      i += size_t(std::max(opt->get_items_expected_min(), 1));
  }
  return out;
}

bool has_option(const std::vector<std::string>& args, const CLI::App& cmd, const std::string& name) {
  const CLI::Option* wanted = options_named(cmd, {name}).front();
  for (size_t i = 1; i < args.size(); ++i)
    if (option_of(args[i], cmd) == wanted) return true;
  return false;
}

RestartPlan plan_restart(const std::vector<std::string>& first_args, const CLI::App& cmd, const SaveDirSnapshot& before,
                         bool no_save_optim) {
  const std::string& save = before.root;
  RestartPlan p;
  p.iteration = newest_intact_checkpoint_since(before);
  if (!p.iteration) {
    p.args = first_args;
    p.note = str_cat("no checkpoint of this run in ", save, " yet: starting again with the first start's flags");
    // Only this run can have left iterations (incomplete ones) in a directory that held none:
    // the first start's flags would now be refused as saving over another run's.
    if (!before.held_checkpoints && holds_checkpoints(save) && !has_option(first_args, cmd, "--overwrite")) {
      p.args.emplace_back("--overwrite");
      p.note += str_cat(" and --overwrite (", save,
                        " holds only this run's incomplete iterations: ", checkpoint_iterations_str(save), ")");
    }
    return p;
  }
  p.args = without_options(first_args, cmd,
                           {"--load", "--ckpt-step", "--finetune", "--overwrite", "--no-load-optim", "--no-load-rng"});
  p.args.insert(p.args.end(), {"--load", save, "--ckpt-step", std::to_string(*p.iteration)});
  if (no_save_optim) p.args.emplace_back("--no-load-optim");  // the checkpoints hold no optimizer state
  p.note = str_cat("resuming from iteration ", *p.iteration, " of ", save, " (--load ", save, " --ckpt-step ",
                   *p.iteration, ")");
  // The tracker can name only this run's iterations by now (it went on from the directory or
  // rewound it): a newer one than K is this run's own broken checkpoint.
  const std::optional<int64_t> tracker = find_checkpoint_tracker(save);
  if (tracker && *tracker > *p.iteration) {
    p.args.emplace_back("--overwrite");
    p.note += str_cat(" with --overwrite: the tracker names iteration ", *tracker, ", which is not intact");
  }
  return p;
}

}  // namespace troupe::apps
