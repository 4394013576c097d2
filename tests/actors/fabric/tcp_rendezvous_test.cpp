// The TCP rendezvous (actors/fabric/tcp_rendezvous.hpp) with the "processes" as threads of this
// one: three processes connect in a full mesh and talk over TcpLinks; two processes claiming one
// rank, disagreeing sizes, and processes that wait for nobody fail naming the variable or the
// address within the rendezvous timeout.
#include "actors/fabric/tcp_rendezvous.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "actors/fabric/tcp_links.hpp"
#include "base/check.hpp"

namespace troupe::test {
namespace {

using actors::LaunchEnv;
using actors::UniqueFd;
using namespace std::chrono_literals;

int free_port() {
  UniqueFd s = actors::tcp_listen(AF_INET, 0, "a free port");
  return actors::tcp_local_port(s.get());
}

LaunchEnv env_of(int rank, int world_size, int port, std::chrono::milliseconds timeout = 20s) {
  LaunchEnv env;
  env.launcher = actors::Launcher::torchrun;
  env.rank = rank;
  env.world_size = world_size;
  env.local_rank = rank;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.rendezvous_timeout = timeout;
  return env;
}

// Runs tcp_rendezvous for each env on a thread of its own; [i]: its sockets, or its error.
struct Outcome {
  std::vector<UniqueFd> peers;
  std::string error;
};
std::vector<Outcome> rendezvous(const std::vector<LaunchEnv>& envs) {
  std::vector<Outcome> out(envs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < envs.size(); ++i)
    threads.emplace_back([&, i] {
      if (i > 0) std::this_thread::sleep_for(20ms * int(i));  // the others start after process 0 (or not)
      try {
        out[i].peers = actors::tcp_rendezvous(envs[i]);
      } catch (const Error& e) {
        out[i].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(TcpRendezvous, ThreeProcessesConnectInAFullMesh) {
  const int port = free_port();
  // Process 2 first: it retries until process 0 listens.
  std::vector<Outcome> out = rendezvous({env_of(2, 3, port), env_of(0, 3, port), env_of(1, 3, port)});
  std::vector<std::unique_ptr<actors::TcpLinks>> links(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(out[size_t(i)].error, "") << "thread " << i;
    const int rank = i == 0 ? 2 : i - 1;
    links[size_t(rank)] = std::make_unique<actors::TcpLinks>(rank, rank, std::move(out[size_t(i)].peers));
  }
  // Every process sends its rank to every other.
  std::vector<std::vector<int32_t>> got(3, std::vector<int32_t>(3, -1));
  std::vector<int32_t> mine = {0, 1, 2};
  std::vector<std::unique_ptr<actors::LinkRequests>> rq;
  for (int p = 0; p < 3; ++p) {
    rq.push_back(links[size_t(p)]->requests());
    for (int q = 0; q < 3; ++q) {
      if (q == p) continue;
      rq.back()->send(0, &mine[size_t(p)], 4, q, 1, q);
      rq.back()->recv(0, &got[size_t(p)][size_t(q)], 4, q, 1, q);
    }
  }
  for (auto& r : rq) {
    std::vector<int> late;
    EXPECT_TRUE(r->wait_until(std::chrono::steady_clock::now() + 10s, nullptr, late));
  }
  for (int p = 0; p < 3; ++p)
    for (int q = 0; q < 3; ++q)
      if (q != p) {
        EXPECT_EQ(got[size_t(p)][size_t(q)], q) << p << " from " << q;
      }
}

TEST(TcpRendezvous, TwoProcessesClaimingOneRank) {
  const int port = free_port();
  std::vector<Outcome> out = rendezvous({env_of(0, 3, port), env_of(1, 3, port), env_of(1, 3, port)});
  EXPECT_NE(out[0].error.find("RANK=1 is claimed by two processes"), std::string::npos) << out[0].error;
  // The second claimant hears the same (the first one too, if it was connected by then).
  EXPECT_NE(out[2].error.find("RANK=1 is claimed by two processes"), std::string::npos) << out[2].error;
}

TEST(TcpRendezvous, WorldSizesThatDisagree) {
  const int port = free_port();
  std::vector<Outcome> out = rendezvous({env_of(0, 2, port), env_of(1, 3, port)});
  for (const Outcome& o : out)
    EXPECT_NE(o.error.find("WORLD_SIZE disagrees between processes: process 0 has WORLD_SIZE=2, the process with "
                           "RANK=1"),
              std::string::npos)
        << o.error;
}

TEST(TcpRendezvous, NobodyAtTheMasterAddress) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Outcome> out = rendezvous({env_of(1, 2, port, 1s)});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(out[0].error.find("could not reach process 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port)),
            std::string::npos)
      << out[0].error;
  EXPECT_NE(out[0].error.find("TROUPE_RENDEZVOUS_TIMEOUT"), std::string::npos) << out[0].error;
}

TEST(TcpRendezvous, ProcessZeroWaitsForTheOthersUntilTheTimeout) {
  const int port = free_port();
  std::vector<Outcome> out = rendezvous({env_of(0, 3, port, 1s), env_of(2, 3, port, 1s)});
  EXPECT_NE(out[0].error.find("processes 1 did not arrive within 1 s"), std::string::npos) << out[0].error;
  EXPECT_NE(out[1].error.find("processes 1 did not arrive"), std::string::npos) << out[1].error;
}

TEST(TcpRendezvous, APortThatIsTaken) {
  UniqueFd taken = actors::tcp_listen(AF_INET, 0, "a taken port");
  const int port = actors::tcp_local_port(taken.get());
  std::vector<Outcome> out = rendezvous({env_of(0, 2, port, 1s)});
  EXPECT_NE(out[0].error.find("MASTER_PORT=" + std::to_string(port)), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("cannot listen on port"), std::string::npos) << out[0].error;
}

}  // namespace
}  // namespace troupe::test
