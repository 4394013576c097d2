// Reading how a process was launched (actors/fabric/launch_env.hpp): mpirun's, torchrun's and
// Slurm's variables, and the errors for missing or contradictory ones, each naming the variable.
#include "actors/fabric/launch_env.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "base/check.hpp"

namespace troupe::test {
namespace {

using actors::LaunchEnv;
using actors::Launcher;
using Vars = std::map<std::string, std::string>;

LaunchEnv read(const Vars& vars) {
  return actors::read_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The error read() throws ("" if none).
std::string error_of(const Vars& vars) {
  try {
    read(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Vars kTorchrun = {{"RANK", "3"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "node07"},
                        {"MASTER_PORT", "29500"},
                        {"GROUP_RANK", "1"},
                        {"TORCHELASTIC_RUN_ID", "x"}};
const Vars kSlurm = {{"SLURM_PROCID", "5"},       {"SLURM_NTASKS", "16"},  {"SLURM_LOCALID", "1"},
                     {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "6000"}, {"SLURM_JOB_ID", "42"}};

Vars with(Vars vars, const std::string& name, const char* value) {
  if (value)
    vars[name] = value;
  else
    vars.erase(name);
  return vars;
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const LaunchEnv env = read({{"MASTER_ADDR", "somewhere"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(env.launcher, Launcher::none);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
}

TEST(LaunchEnv, MpirunKeepsMpi) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    EXPECT_EQ(read(with(kTorchrun, name, "1")).launcher, Launcher::mpirun) << name;
    EXPECT_EQ(read(with(kSlurm, name, "1")).launcher, Launcher::mpirun) << name;
  }
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv env = read(kTorchrun);
  EXPECT_EQ(env.launcher, Launcher::torchrun);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node07");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.rendezvous_timeout, std::chrono::minutes(5));
  EXPECT_EQ(read(with(kTorchrun, "TROUPE_RENDEZVOUS_TIMEOUT", "7")).rendezvous_timeout, std::chrono::seconds(7));
  // torchrun under Slurm (srun torchrun ...): torchrun's variables win.
  Vars both = kSlurm;
  both.insert(kTorchrun.begin(), kTorchrun.end());
  EXPECT_EQ(read(both).rank, 3);
}

// torchrun's agent holds MASTER_PORT for its own store: process 0 listens on the next port,
// or on TROUPE_RENDEZVOUS_PORT.
TEST(LaunchEnv, TorchrunsAgentStoreKeepsMasterPort) {
  const LaunchEnv agent = read(with(kTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "True"));
  EXPECT_EQ(agent.master_port, 29501);
  EXPECT_STREQ(agent.master_port_var, "MASTER_PORT+1");
  EXPECT_EQ(read(with(kTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "False")).master_port, 29500);
  const LaunchEnv own =
      read(with(with(kTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "True"), "TROUPE_RENDEZVOUS_PORT", "6001"));
  EXPECT_EQ(own.master_port, 6001);
  EXPECT_STREQ(own.master_port_var, "TROUPE_RENDEZVOUS_PORT");
  EXPECT_EQ(read(with(kSlurm, "TROUPE_RENDEZVOUS_PORT", "7000")).master_port, 7000);
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv env = read(kSlurm);
  EXPECT_EQ(env.launcher, Launcher::slurm);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 16);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 6000);
}

TEST(LaunchEnv, WorldSizeOneNeedsNoMaster) {
  const LaunchEnv env = read({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(env.launcher, Launcher::torchrun);
  EXPECT_EQ(env.world_size, 1);
}

// Each bad environment and the words its error must hold.
TEST(LaunchEnv, BadVariablesAreErrorsNamingThem) {
  const std::vector<std::pair<Vars, std::vector<std::string>>> cases = {
      {with(kTorchrun, "RANK", "8"), {"RANK=8", "WORLD_SIZE=8"}},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"RANK=2"}},
      {with(kTorchrun, "MASTER_ADDR", nullptr), {"MASTER_ADDR is not set"}},
      {with(kTorchrun, "MASTER_PORT", nullptr), {"MASTER_PORT is not set"}},
      {with(kTorchrun, "MASTER_PORT", "70000"), {"MASTER_PORT=70000"}},
      {with(kTorchrun, "RANK", "one"), {"RANK=one", "not a whole number"}},
      {with(kTorchrun, "RANK", "-1"), {"RANK=-1"}},
      {with(kTorchrun, "WORLD_SIZE", "8x"), {"WORLD_SIZE=8x", "not a whole number"}},
      {with(kTorchrun, "WORLD_SIZE", ""), {"WORLD_SIZE=", "not a whole number"}},
      {with(kTorchrun, "WORLD_SIZE", "0"), {"WORLD_SIZE=0"}},
      {with(kTorchrun, "WORLD_SIZE", nullptr), {"WORLD_SIZE is not set"}},
      {with(kTorchrun, "RANK", nullptr), {"RANK is not set"}},
      {with(kTorchrun, "LOCAL_RANK", nullptr), {"LOCAL_RANK is not set"}},
      {with(kTorchrun, "LOCAL_RANK", "2"), {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}},
      {with(kTorchrun, "TROUPE_RENDEZVOUS_TIMEOUT", "soon"), {"TROUPE_RENDEZVOUS_TIMEOUT=soon"}},
      {with(kTorchrun, "TROUPE_RENDEZVOUS_PORT", "0"), {"TROUPE_RENDEZVOUS_PORT=0"}},
      {with(with(kTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_PORT", "65535"),
       {"MASTER_PORT=65535", "TROUPE_RENDEZVOUS_PORT"}},
      {with(kSlurm, "SLURM_PROCID", "16"), {"SLURM_PROCID=16", "SLURM_NTASKS=16"}},
      {with(kSlurm, "SLURM_NTASKS", nullptr), {"SLURM_NTASKS is not set"}},
      {with(kSlurm, "SLURM_LOCALID", "x"), {"SLURM_LOCALID=x"}},
      {with(kSlurm, "MASTER_ADDR", nullptr), {"MASTER_ADDR is not set", "SLURM_PROCID"}},
  };
  for (const auto& [vars, words] : cases) {
    std::string shown;
    for (const auto& [k, v] : vars) shown += k + "=" + v + " ";
    const std::string error = error_of(vars);
    ASSERT_FALSE(error.empty()) << shown;
    for (const std::string& w : words) EXPECT_NE(error.find(w), std::string::npos) << shown << "\n" << error;
  }
}

}  // namespace
}  // namespace troupe::test
