// `troupe train --auto-restart N`: the command becomes a supervisor that runs the training as a
// child process (this program again, with the same flags less --auto-restart) and restarts it
// when it fails, up to N times, from the newest intact checkpoint this run wrote into --save
// (apps/train/restart_plan.hpp), like torchrun's --max-restarts.
//
// Restarted: a process that exits with status 1 (the run failed) or is killed by a signal other
// than SIGINT/SIGTERM (SIGKILL, SIGSEGV, SIGABRT, ...). Not restarted: success (0), a wrong
// command line (2), and an interrupt: SIGINT/SIGTERM sent to the supervisor are forwarded to the
// training process, which saves and stops, and the supervisor then exits with its status (130).
// Out of restarts, the supervisor exits with the last process's status. Each process gets
// TROUPE_RESTART_COUNT (0 for the first start) in its environment. Refused under mpirun: one
// restarted rank cannot rejoin its MPI world; use the launcher's restarts.
//
//   return supervise_training(*train_cmd, {.max_restarts = 3, .save = "ckpt"});
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace troupe::apps {

struct SupervisorOptions {
  int64_t max_restarts = 0;    // --auto-restart N
  std::string save = {};       // --save
  bool no_save_optim = false;  // --no-save-optim: a restart loads with --no-load-optim
};

// Runs the `troupe train` command line of this process (`train_cmd` is its subcommand) under
// supervision; returns the exit status for main().
int supervise_training(const CLI::App& train_cmd, const SupervisorOptions& o);

}  // namespace troupe::apps
