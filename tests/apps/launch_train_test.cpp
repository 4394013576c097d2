// `troupe train` started as torchrun or srun start it: two processes with torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or Slurm's (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, MASTER_ADDR, MASTER_PORT) link over TCP and log the same losses,
// bit for bit, as the same layout in one process; a bad variable is an error naming it; and a
// process killed with SIGKILL ends the other within seconds with an error naming it.
// (docs/launching.md; torchrun itself needs PyTorch, so the test sets the variables.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <map>
#include <sstream>

#include "actors/fabric/tcp_socket.hpp"
#include "base/check.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// torchrun's agent on the first node: it holds MASTER_PORT (its rendezvous store) for the
// whole run, and MASTER_PORT+1 is free for process 0.
struct TorchrunAgent {
  actors::UniqueFd store;
  int port = 0;
  TorchrunAgent() {
    for (int tries = 0; tries < 50 && port == 0; ++tries) {
      store = actors::tcp_listen(AF_INET, 0, "torchrun's store");
      const int p = actors::tcp_local_port(store.get());
      try {
        actors::tcp_listen(AF_INET, p + 1, "the port after it");  // closed at once
        port = p;
      } catch (const Error&) {  // taken: another pair
      }
    }
    TROUPE_CHECK(port > 0, "no two free ports in a row");
  }
};

int free_port() {
  actors::UniqueFd s = actors::tcp_listen(AF_INET, 0, "a free port");
  return actors::tcp_local_port(s.get());
}

// `env` with a clean slate for the launch variables, then `vars`: the launcher of process r.
std::vector<std::string> env_launcher(const std::vector<std::string>& vars) {
  std::vector<std::string> l = {"env"};
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                           "PMI_RANK", "TORCHELASTIC_USE_AGENT_STORE", "TROUPE_RENDEZVOUS_PORT"})
    l.insert(l.end(), {"-u", name});
  l.insert(l.end(), vars.begin(), vars.end());
  l.push_back("TROUPE_RENDEZVOUS_TIMEOUT=60");
  return l;
}

// As torchrun sets them (`port`: its agent's store, see TorchrunAgent).
std::vector<std::string> torchrun_vars(int rank, int port) {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=2",
          "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=2",
          "GROUP_RANK=0",
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port),
          "TORCHELASTIC_RUN_ID=launch_train_test",
          "TORCHELASTIC_USE_AGENT_STORE=True"};
}

std::vector<std::string> slurm_vars(int rank, int port) {
  return {"SLURM_PROCID=" + std::to_string(rank),
          "SLURM_NTASKS=2",
          "SLURM_LOCALID=" + std::to_string(rank),
          "SLURM_JOB_ID=1",
          "MASTER_ADDR=localhost",
          "MASTER_PORT=" + std::to_string(port)};
}

using VarsFn = std::vector<std::string> (*)(int, int);

// The losses of `layout` on two devices in one process, and on one device in each of two
// processes started with vars(rank, port).
void expect_same_losses(const std::vector<std::string>& layout, VarsFn vars, const std::string& tag) {
  TempDir dir(tag);
  const int64_t iters = 4;
  std::vector<std::string> one = layout, two = layout;
  one.insert(one.end(), {"--devices", "2"});
  two.insert(two.end(), {"--devices", "1"});
  Troupe single(env_launcher({}), tiny_train_args(iters, one), dir / "one.txt");
  ASSERT_EQ(single.wait(120s), 0) << single.output();
  const TorchrunAgent agent;
  const int port = vars == slurm_vars ? free_port() : agent.port;
  Troupe p0(env_launcher(vars(0, port)), tiny_train_args(iters, two), dir / "p0.txt");
  Troupe p1(env_launcher(vars(1, port)), tiny_train_args(iters, two), dir / "p1.txt");
  ASSERT_EQ(p0.wait(120s), 0) << p0.output() << "\nprocess 1:\n" << p1.output();
  ASSERT_EQ(p1.wait(30s), 0) << p1.output();
  EXPECT_NE(p0.output().find("2 CPU devices"), std::string::npos) << p0.output();
  const auto a = logged_losses(single.output()), b = logged_losses(p0.output());
  ASSERT_EQ(a.size(), size_t(iters)) << single.output();
  EXPECT_EQ(a, b) << "one process:\n" << single.output() << "\ntwo processes:\n" << p0.output();
}

TEST(LaunchTrain, TorchrunVariablesReproduceOneProcess) {
  expect_same_losses({"--pipeline-model-parallel-size", "2"}, torchrun_vars, "launch_torchrun");
}

TEST(LaunchTrain, SlurmVariablesReproduceOneProcess) {
  expect_same_losses({"--tensor-model-parallel-size", "2"}, slurm_vars, "launch_slurm");
}

TEST(LaunchTrain, BadVariablesAreErrorsNamingThem) {
  TempDir dir("launch_bad");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"},
       "RANK=2 is not below WORLD_SIZE=2"},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1"}, "MASTER_ADDR is not set"},
      {{"SLURM_PROCID=0", "SLURM_NTASKS=two", "SLURM_LOCALID=0"}, "SLURM_NTASKS=two is not a whole number"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Troupe t(env_launcher(cases[i].first), tiny_train_args(2, {}), dir / ("bad" + std::to_string(i) + ".txt"));
    EXPECT_EQ(t.wait(30s), 1) << t.output();
    EXPECT_NE(t.output().find("troupe: error: " + cases[i].second), std::string::npos) << t.output();
  }
}

// kill -9 of either process of a two-process run: the other ends with an error naming it within
// seconds (far below the op timeout), not at a timeout.
TEST(LaunchTrain, AKilledProcessEndsTheOtherWithinSeconds) {
  TempDir dir("launch_kill");
  for (int victim : {1, 0}) {
    const TorchrunAgent agent;
    const int port = agent.port;
    const std::vector<std::string> args =
        tiny_train_args(100000, {"--pipeline-model-parallel-size", "2", "--devices", "1"});
    Troupe p0(env_launcher(torchrun_vars(0, port)), args, dir / ("p0_" + std::to_string(victim) + ".txt"));
    Troupe p1(env_launcher(torchrun_vars(1, port)), args, dir / ("p1_" + std::to_string(victim) + ".txt"));
    p0.await_output("lm loss: ", 120s);  // training (only process 0 prints iterations)
    Troupe& dead = victim == 0 ? p0 : p1;
    Troupe& survivor = victim == 0 ? p1 : p0;
    dead.signal(SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<int> code = survivor.wait(60s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(code.has_value()) << "process " << 1 - victim << " still runs 60 s after process " << victim
                                  << " was killed:\n"
                                  << survivor.output();
    EXPECT_NE(*code, 0) << survivor.output();
    EXPECT_LT(seconds, 10.0) << survivor.output();
    const std::string out = survivor.output();
    const size_t error = out.find("troupe] error: ");  // "[rank R troupe] error: ..." under several processes
    ASSERT_NE(error, std::string::npos) << out;
    EXPECT_NE(out.find("process " + std::to_string(victim), error), std::string::npos) << out;
    std::printf("process %d killed: process %d ended after %.2f s: %s\n", victim, 1 - victim, seconds,
                out.substr(error, out.find('\n', error) - error).c_str());
  }
}

}  // namespace
}  // namespace troupe::test
