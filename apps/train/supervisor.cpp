#include "apps/train/supervisor.hpp"

#include <csignal>
#include <fstream>
#include <iterator>
#include <vector>

#include "actors/fabric/launch_env.hpp"
#include "apps/common/config_file.hpp"
#include "apps/train/child_process.hpp"
#include "apps/train/restart_plan.hpp"
#include "base/check.hpp"
#include "base/log.hpp"

namespace troupe::apps {

namespace {

constexpr int kExitUsage = 2, kExitInterrupted = 130;  // docs/troubleshooting.md

// A launcher started this process as one rank of several (mpirun, even with one rank: a
// restarted process would start MPI again as a rank its world already had), as the fabric reads
// it: "" when not, else the launcher's name.
std::string multi_process_launcher() {
  const actors::LaunchEnv env = actors::read_launch_env();
  if (env.launcher == actors::Launcher::mpirun || env.world_size > 1) return actors::launcher_name(env.launcher);
  return "";
}

// This process's own command line, as it was given (argv, config files not yet expanded).
std::vector<std::string> read_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  TROUPE_CHECK(in.good(), "--auto-restart: cannot read /proc/self/cmdline to start the training process again");
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> words;
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = all.find('\0', start);
    words.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  TROUPE_CHECK(!words.empty(), "--auto-restart: /proc/self/cmdline is empty");
  return words;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

int supervise_training(const CLI::App& train_cmd, const SupervisorOptions& o) {
  const std::string launcher = multi_process_launcher();
  TROUPE_CHECK(launcher.empty(), "--auto-restart cannot restart one process of a run launched by ", launcher,
               " (a lone restarted process cannot rejoin the others): drop --auto-restart and use the launcher's "
               "restarts (torchrun's --max-restarts, the job scheduler's requeue) with --load");
  TROUPE_CHECK(!o.save.empty(), "--auto-restart needs --save: a restart resumes from the checkpoints saved there");
  TROUPE_CHECK(o.max_restarts >= 0, "--auto-restart must be >= 0, got ", o.max_restarts);
  const CLI::App* root = train_cmd.get_parent();
  TROUPE_CHECK(root != nullptr, "supervise_training: `troupe train` has no parent command");
  // The config files expanded once, so --auto-restart and the checkpoint flags can be replaced
  // wherever they were written.
  const std::vector<std::string> first =
      without_options(expand_config_args(*root, read_command_line()), train_cmd, {"--auto-restart"});
  const SaveDirSnapshot before = snapshot_save_dir(o.save);
  const Logger& log = logger("supervisor");
  forward_stop_signals();

  std::vector<std::string> args = first;
  for (int64_t restart = 0;; ++restart) {
    ChildProcess child(args, {str_cat("TROUPE_RESTART_COUNT=", restart)});
    log.info("training process ", child.pid(), " started (restart ", restart, " of ", o.max_restarts, ")");
    log.debug("training process ", child.pid(), ": ", joined(args));
    const ChildExit e = child.wait();
    const std::string what = str_cat("the training process ", child.pid(), " ", e.describe());
    if (const int sig = stop_signal_received(); sig != 0) {  // forwarded to it: it stopped
      log.info("stopped by signal ", sig, ": ", what, "; not restarted");
      return e.signal == SIGINT || e.signal == SIGTERM ? kExitInterrupted : e.status();
    }
    if (e.status() == 0) return 0;
    if (e.status() == kExitUsage) {
      log.error(what, " (the command line is wrong): not restarted");
      return kExitUsage;
    }
    if (e.status() == kExitInterrupted || e.signal == SIGINT || e.signal == SIGTERM) {
      log.info(what, " (stopped by a signal sent to it): not restarted");
      return kExitInterrupted;
    }
    const std::string why = e.last_error.empty() ? what : str_cat(what, " after the error: ", e.last_error);
    if (restart >= o.max_restarts) {
      log.error("out of restarts (--auto-restart ", o.max_restarts, "): ", why, "; exiting with its status ",
                e.status());
      return e.status();
    }
    const RestartPlan plan = plan_restart(first, train_cmd, before, o.no_save_optim);
    log.warning("restart ", restart + 1, " of ", o.max_restarts, ": ", why, "; ", plan.note);
    args = plan.args;
  }
}

}  // namespace troupe::apps
