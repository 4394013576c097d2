// What `troupe train --auto-restart` (apps/train/supervisor.hpp) restarts a failed training
// process with: the newest intact checkpoint that this supervised run wrote into --save, and the
// command line that resumes from it.
//
// Only checkpoints written since the supervisor started count: a --save directory that already
// held another run's checkpoints (given --overwrite) may keep iterations newer than this run's
// until its saves replace them, and those must not be resumed. A restart loads its own run
// (--load SAVE --ckpt-step K), so storage/checkpoint_ownership.hpp lets it save there as the
// same run going on; only when the tracker names a newer checkpoint of this run that is broken
// does the restart pass --overwrite, which rewinds the tracker to K.
//
//   const SaveDirSnapshot before = snapshot_save_dir(o.save);   // before the first start
//   ... the training process fails ...
//   const RestartPlan p = plan_restart(first_args, train_cmd, before, o.no_save_optim);
//   // p.args: first_args, or them resuming from p.iteration; p.note says which, for the log
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::apps {

// The complete checkpoints of a --save directory at one moment: each one's iteration and the
// time its metadata.json was written.
struct SaveDirSnapshot {
  std::string root;
  bool held_checkpoints = false;  // a tracker or any iter_* directory, complete or not
  std::map<int64_t, std::filesystem::file_time_type> complete;
};

SaveDirSnapshot snapshot_save_dir(const std::string& root);

// The newest intact checkpoint of before.root written (or rewritten) since `before` was taken;
// nullopt when there is none. "Intact" is storage/checkpoint_catalog.hpp's checkpoint_defect.
std::optional<int64_t> newest_intact_checkpoint_since(const SaveDirSnapshot& before);

// `args` without every occurrence of the options of `cmd` that `names` name (any of an option's
// names; "--name VALUE", "--name=VALUE", or a flag's "--name").
std::vector<std::string> without_options(const std::vector<std::string>& args, const CLI::App& cmd,
                                         const std::vector<std::string>& names);
// Whether `args` give the option of `cmd` called `name`.
bool has_option(const std::vector<std::string>& args, const CLI::App& cmd, const std::string& name);

struct RestartPlan {
  std::vector<std::string> args;     // the command line of the restarted process
  std::optional<int64_t> iteration;  // the checkpoint it resumes from; nullopt: from the start
  std::string note;                  // one sentence for the log: where it resumes and how
};

// `first_args` (the first start's command line, args[0] the program; `cmd` is `troupe train`)
// restarted after a failure: resuming from the newest intact checkpoint of this run in
// before.root (--load, --ckpt-step, --finetune, --overwrite, --no-load-optim and --no-load-rng
// replaced: the restart goes on with the whole state of its own run; --no-load-optim kept
// when `no_save_optim`), else `first_args` again.
RestartPlan plan_restart(const std::vector<std::string>& first_args, const CLI::App& cmd, const SaveDirSnapshot& before,
                         bool no_save_optim);

}  // namespace troupe::apps
