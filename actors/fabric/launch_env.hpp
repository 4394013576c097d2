// How this process was launched, read from its environment (internal to actors/): by mpirun
// (MPI's variables), by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), by
// Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT
// exported by the batch script), or as one process. Missing or contradictory variables are
// errors naming the variable. torchrun's agent keeps its own store on MASTER_PORT of the first
// node, so under it (TORCHELASTIC_USE_AGENT_STORE=True) process 0 listens on MASTER_PORT + 1;
// TROUPE_RENDEZVOUS_PORT overrides either. docs/launching.md is the user's page.
//
//   const LaunchEnv env = read_launch_env();
//   if (env.launcher == Launcher::torchrun) ... env.rank, env.world_size, env.master_addr ...
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace troupe::actors {

enum class Launcher { none, mpirun, torchrun, slurm };
const char* launcher_name(Launcher l);  // "one process", "mpirun", "torchrun", "srun"

struct LaunchEnv {
  Launcher launcher = Launcher::none;
  int rank = 0;             // RANK / SLURM_PROCID
  int world_size = 1;       // WORLD_SIZE / SLURM_NTASKS
  int local_rank = 0;       // LOCAL_RANK / SLURM_LOCALID: this process's index on its machine (its GPU)
  std::string master_addr;  // where process 0 listens (unset for one process)
  int master_port = 0;
  // Where master_port comes from, for errors: "MASTER_PORT"; "MASTER_PORT+1" under torchrun,
  // whose own store holds MASTER_PORT on the first node (TORCHELASTIC_USE_AGENT_STORE=True);
  // "TROUPE_RENDEZVOUS_PORT" when that is set.
  const char* master_port_var = "MASTER_PORT";
  // How long the processes wait for each other at the start (TROUPE_RENDEZVOUS_TIMEOUT, s).
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);
  // The names of the variables read, for errors: "RANK" or "SLURM_PROCID", ...
  const char* rank_var = "RANK";
  const char* world_size_var = "WORLD_SIZE";
};

// `getenv` returns a variable's value or null (std::getenv, or a map in tests).
LaunchEnv read_launch_env(const std::function<const char*(const char*)>& getenv);
LaunchEnv read_launch_env();  // this process's environment

}  // namespace troupe::actors
