#include "actors/fabric/launch_env.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

using Getenv = std::function<const char*(const char*)>;

// The whole value as a decimal integer in [lo, hi]; errors name the variable and its value.
long parse_int(const Getenv& getenv, const char* name, long lo, long hi, const std::string& hint) {
  const char* text = getenv(name);
  TROUPE_CHECK(text != nullptr, name, " is not set", hint);
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  TROUPE_CHECK(*text != '\0' && end && *end == '\0' && errno == 0, name, "=", text,
               " is not a whole number; set it to one (docs/launching.md)");
  TROUPE_CHECK(value >= lo && value <= hi, name, "=", text, " is out of range: it must be in [", lo, ", ", hi, "]",
               hint);
  return value;
}

bool set(const Getenv& getenv, const char* name) { return getenv(name) != nullptr; }

// MASTER_ADDR and MASTER_PORT: where process 0 listens and the others connect.
void read_master(const Getenv& getenv, LaunchEnv& env, const char* who) {
  const std::string hint =
      str_cat(" (", who, " runs need MASTER_ADDR and MASTER_PORT: process 0's host and a free port)");
  const char* addr = getenv("MASTER_ADDR");
  TROUPE_CHECK(addr != nullptr && *addr != '\0', "MASTER_ADDR is not set but ", env.rank_var, " and ",
               env.world_size_var, " are", hint);
  env.master_addr = addr;
  env.master_port = int(parse_int(getenv, "MASTER_PORT", 1, 65535, hint));
  const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (set(getenv, "TROUPE_RENDEZVOUS_PORT")) {
    env.master_port = int(parse_int(getenv, "TROUPE_RENDEZVOUS_PORT", 1, 65535, " (the port process 0 listens on)"));
    env.master_port_var = "TROUPE_RENDEZVOUS_PORT";
  } else if (agent_store && std::string(agent_store) == "True") {
    // torchrun's agent on the first node serves its rendezvous store on MASTER_PORT.
    TROUPE_CHECK(env.master_port < 65535, "MASTER_PORT=", env.master_port,
                 ": under torchrun process 0 listens on MASTER_PORT+1 (torchrun's store holds MASTER_PORT); pick a "
                 "lower port or set TROUPE_RENDEZVOUS_PORT");
    env.master_port += 1;
    env.master_port_var = "MASTER_PORT+1";
  }
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::mpirun:
      return "mpirun";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::slurm:
      return "srun";
    case Launcher::none:
      break;
  }
  return "one process";
}

LaunchEnv read_launch_env(const Getenv& getenv) {
  LaunchEnv env;
  // mpirun first: its processes keep MPI even inside a Slurm job or with RANK set.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (set(getenv, name)) {
      env.launcher = Launcher::mpirun;
      return env;
    }
  constexpr long kMax = std::numeric_limits<int>::max();
  const bool torchrun = set(getenv, "RANK") || set(getenv, "WORLD_SIZE");
  if (!torchrun && !set(getenv, "SLURM_PROCID")) return env;
  if (torchrun) {  // torchrun (or any launcher with its variables); also under Slurm (srun torchrun ...)
    env.launcher = Launcher::torchrun;
    const std::string hint = " (torchrun sets RANK, WORLD_SIZE and LOCAL_RANK together)";
    env.world_size = int(parse_int(getenv, "WORLD_SIZE", 1, kMax, hint));
    env.rank = int(parse_int(getenv, "RANK", 0, kMax, hint));
    env.local_rank = int(parse_int(getenv, "LOCAL_RANK", 0, kMax, hint));
    if (set(getenv, "LOCAL_WORLD_SIZE")) {
      const int local_size = int(parse_int(getenv, "LOCAL_WORLD_SIZE", 1, kMax, hint));
      TROUPE_CHECK(env.local_rank < local_size, "LOCAL_RANK=", env.local_rank,
                   " is not below LOCAL_WORLD_SIZE=", local_size,
                   ": each process on a machine needs its own LOCAL_RANK from 0 to LOCAL_WORLD_SIZE-1");
    }
  } else {
    env.launcher = Launcher::slurm;
    env.rank_var = "SLURM_PROCID";
    env.world_size_var = "SLURM_NTASKS";
    const std::string hint = " (srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID for each task)";
    env.world_size = int(parse_int(getenv, "SLURM_NTASKS", 1, kMax, hint));
    env.rank = int(parse_int(getenv, "SLURM_PROCID", 0, kMax, hint));
    env.local_rank = int(parse_int(getenv, "SLURM_LOCALID", 0, kMax, hint));
  }
  TROUPE_CHECK(env.rank < env.world_size, env.rank_var, "=", env.rank, " is not below ", env.world_size_var, "=",
               env.world_size, ": the processes of a run are numbered 0 to ", env.world_size_var, "-1");
  if (set(getenv, "TROUPE_RENDEZVOUS_TIMEOUT")) {
    const long seconds = parse_int(getenv, "TROUPE_RENDEZVOUS_TIMEOUT", 1, 7 * 24 * 3600,
                                   " (seconds the processes wait for each other)");
    env.rendezvous_timeout = std::chrono::seconds(seconds);
  }
  if (env.world_size > 1) read_master(getenv, env, launcher_name(env.launcher));
  return env;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const char* name) { return std::getenv(name); });
}

}  // namespace troupe::actors
