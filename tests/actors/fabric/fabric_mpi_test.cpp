// The Fabric (actors/fabric/fabric.hpp) as one process, under `mpirun -np 2` (the ctest entry
// fabric_mpi_test_np2) and as two processes with torchrun's variables, linked over TCP
// (fabric_mpi_test_tcp_np2, tests/launch_env.sh): host-side helpers over processes; CPU groups laid out two members per
// process, one per process, interleaved, and wholly in one process, with every op checked
// against sums taken in member order (so every member, in every process, holds the same bits),
// and all-to-all (equal and uneven splits, every dtype) against outputs assembled on the host;
// a member elsewhere that never comes; all-to-all counts that disagree across processes;
// channels between processes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "actors/fabric/fabric.hpp"
#include "tests/actors/fabric/all_to_all_cases.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::Fabric;
using Group = std::vector<std::unique_ptr<Collectives>>;

// One fabric for the whole binary: MPI starts once per process, and ends before main returns.
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

Fabric& fabric() { return *test_fabric(); }
int here() { return fabric().process(); }
int processes() { return fabric().processes(); }

actors::GroupOptions options(const std::string& name, int timeout_ms = 30000) {
  actors::GroupOptions o;
  o.name = name;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

Group make_group(const std::vector<int>& member_process, const std::string& name, int timeout_ms = 30000) {
  std::vector<const Context*> contexts;
  for (int p : member_process) contexts.push_back(p == here() ? &cpu() : nullptr);
  return fabric().make_group(member_process, contexts, options(name, timeout_ms));
}

// Every process can make every member's input.
Tensor input(int member, int64_t n) { return random_normal({n}, 500 + uint64_t(member), 1.0f + float(member)); }

Tensor reference_reduce(int size, int64_t n, ReduceOp op) {
  Tensor out = input(0, n);
  for (int r = 1; r < size; ++r) {
    const Tensor x = input(r, n);
    for (int64_t e = 0; e < n; ++e)
      out.at(e) = op == ReduceOp::sum ? out.at(e) + x.at(e) : std::max(out.at(e), x.at(e));
  }
  return out;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what;
}

// Every op on a group laid out as member_process (by members in this process).
void check_all_ops(const std::vector<int>& member_process, const std::string& name) {
  const int size = int(member_process.size());
  Group group = make_group(member_process, name);
  int local = 0;
  for (int i = 0; i < size; ++i) {
    EXPECT_EQ(group[size_t(i)] != nullptr, member_process[size_t(i)] == here()) << name << " member " << i;
    local += group[size_t(i)] != nullptr;
  }
  // 300k floats: large enough for MPI's rendezvous protocol.
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(5), int64_t(1031), int64_t(300000)}) {
    const std::string at = str_cat(name, " n ", n);
    const size_t members = member_process.size();
    std::vector<Tensor> sum(members), max(members), scattered(members), gathered(members), cast(members);
    run_threads(local_members(group), [&](int m) {
      Collectives& c = *group[size_t(m)];
      EXPECT_EQ(c.rank(), m);
      EXPECT_EQ(c.size(), size);
      sum[size_t(m)] = input(m, n);
      c.all_reduce(cpu(), sum[size_t(m)], ReduceOp::sum);
      max[size_t(m)] = input(m, n);
      c.all_reduce(cpu(), max[size_t(m)], ReduceOp::max);
      const Tensor full = input(m, size * n);  // in place: out is our part of in
      scattered[size_t(m)] = full.slice(m * n, {n});
      c.reduce_scatter(cpu(), full, scattered[size_t(m)]);
      gathered[size_t(m)] = Tensor::host(DType::f32, {size * n});
      c.all_gather(cpu(), input(m, n), gathered[size_t(m)]);
      cast[size_t(m)] = input(m, n);
      c.broadcast(cpu(), cast[size_t(m)], size - 1);
    });
    const Tensor want_sum = reference_reduce(size, n, ReduceOp::sum);
    const Tensor want_max = reference_reduce(size, n, ReduceOp::max);
    const Tensor want_scatter = reference_reduce(size, size * n, ReduceOp::sum);
    for (int m = 0; m < size; ++m) {
      if (!group[size_t(m)]) continue;
      const std::string who = str_cat(at, " member ", m);
      expect_same_bits(sum[size_t(m)], want_sum, who + " all_reduce sum");
      expect_same_bits(max[size_t(m)], want_max, who + " all_reduce max");
      expect_same_bits(scattered[size_t(m)], want_scatter.slice(m * n, {n}), who + " reduce_scatter");
      for (int k = 0; k < size; ++k)
        expect_same_bits(gathered[size_t(m)].slice(k * n, {n}), input(k, n),
                         who + " all_gather part " + std::to_string(k));
      expect_same_bits(cast[size_t(m)], input(size - 1, n), who + " broadcast");
    }
  }
  if (local == 0) SUCCEED() << name << ": no member here";
}

// all_to_all and all_to_all_v (counts through exchange_counts) on a group laid out as
// member_process, every dtype, checked on the members in this process.
void check_all_to_all(const std::vector<int>& member_process, const std::string& name) {
  const int size = int(member_process.size());
  Group group = make_group(member_process, name);
  std::vector<AllToAllCase> cases = uneven_cases(true);
  for (int64_t n : {int64_t(0), int64_t(3), int64_t(300000 / size)}) cases.push_back(equal_split(n));
  for (const AllToAllCase& c : cases)
    for (DType dtype : all_to_all_dtypes()) {
      const bool equal = c.name.rfind("equal", 0) == 0;
      const bool big = c.name == "big" || (equal && c.rows(0, 0) > 1000);
      if (big && dtype != DType::f32) continue;  // the protocol, not the dtype: once is enough
      const std::string at = str_cat(name, " ", c.name, " ", dtype_name(dtype));
      std::vector<Tensor> out(member_process.size());
      std::vector<std::vector<int64_t>> recv(member_process.size());
      run_threads(local_members(group), [&](int m) {
        Collectives& comm = *group[size_t(m)];
        const Tensor in = c.input(size, m, dtype);
        const std::vector<int64_t> send = c.send_counts(size, m);
        recv[size_t(m)] = exchange_counts(cpu(), comm, send);
        int64_t rows = 0;
        for (int64_t k : recv[size_t(m)]) rows += k;
        out[size_t(m)] = Tensor::host(dtype, {rows, c.width});
        if (equal)
          comm.all_to_all(cpu(), in.view({in.numel()}), out[size_t(m)]);
        else
          comm.all_to_all_v(cpu(), in, send, out[size_t(m)], recv[size_t(m)]);
      });
      for (int m = 0; m < size; ++m) {
        if (!group[size_t(m)]) continue;
        EXPECT_EQ(recv[size_t(m)], c.recv_counts(size, m)) << at << " member " << m;
        EXPECT_TRUE(same_bits(out[size_t(m)], c.expected(size, m, dtype))) << at << " member " << m;
      }
    }
}

TEST(Fabric, AllToAll) {
  const int P = processes();
  std::vector<int> two_per_process, one_per_process, interleaved;
  for (int i = 0; i < 4; ++i) two_per_process.push_back((i / 2) % P);
  for (int p = 0; p < P; ++p) one_per_process.push_back(p);
  for (int i = 0; i < 5; ++i) interleaved.push_back(i % P);
  check_all_to_all(two_per_process, "two per process");
  check_all_to_all(one_per_process, "one per process");
  check_all_to_all(interleaved, "interleaved");
  check_all_to_all({P - 1, P - 1, P - 1}, "in the last process");
}

// Member 1 (the last process) expects one row fewer from member 0 (process 0) than it sends:
// both ends fail at once, naming the counts, in both processes (no timeout).
TEST(Fabric, AllToAllVCountsDisagreeAcrossProcesses) {
  const int P = processes();
  Group group = make_group({0, P - 1}, "disagree", 60000);
  const auto start = std::chrono::steady_clock::now();
  run_threads(local_members(group), [&](int m) {
    // Both members send 1 row to member 0 and 3 to member 1 ...
    const std::vector<int64_t> send = {1, 3};
    std::vector<int64_t> recv = {send[size_t(m)], send[size_t(m)]};
    if (m == 1) recv[0] -= 1;  // ... but member 1 expects 2 rows from member 0
    const Tensor in = Tensor::host(DType::f32, {4, 2});
    std::memset(in.data(), 0, in.nbytes());
    const Tensor out = Tensor::host(DType::f32, {recv[0] + recv[1], 2});
    std::string error;
    try {
      group[size_t(m)]->all_to_all_v(cpu(), in, send, out, recv);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("'disagree'"), std::string::npos) << error;
    EXPECT_NE(error.find(m == 0 ? "member 1 sends 1 rows here and expects 2" : "member 0 sends 3 rows here"),
              std::string::npos)
        << "member " << m << ": " << error;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  fabric().barrier();
}

TEST(Fabric, Processes) {
  EXPECT_GE(processes(), 1);
  EXPECT_GE(here(), 0);
  EXPECT_LT(here(), processes());
  const bool mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  EXPECT_EQ(fabric().uses_mpi(), mpirun);
  EXPECT_EQ(fabric().uses_tcp(), processes() > 1 && !mpirun);
  if (const char* rank = std::getenv("RANK"); rank && !mpirun) {  // torchrun's variables
    EXPECT_EQ(here(), std::atoi(rank));
    EXPECT_EQ(processes(), std::atoi(std::getenv("WORLD_SIZE")));
    EXPECT_EQ(fabric().node_process(), std::atoi(std::getenv("LOCAL_RANK")));
  }
  EXPECT_EQ(Fabric::init().get(), test_fabric());  // one per process
}

TEST(Fabric, HostHelpers) {
  const int P = processes(), me = here();
  std::vector<double> sum = {double(me + 1), 0.1 * (me + 1), -1.0};
  fabric().all_reduce(sum, ReduceOp::sum);
  double want = 0.1;
  for (int p = 1; p < P; ++p) want += 0.1 * (p + 1);  // in process order
  EXPECT_EQ(sum[0], double(P) * (P + 1) / 2);
  EXPECT_EQ(sum[1], want);
  EXPECT_EQ(sum[2], -double(P));
  std::vector<double> max = {double(me), -double(me)};
  fabric().all_reduce(max, ReduceOp::max);
  EXPECT_EQ(max[0], double(P - 1));
  EXPECT_EQ(max[1], 0.0);

  const std::vector<std::string> names =
      fabric().all_gather(std::string(size_t(me), 'x') + "process " + std::to_string(me));
  ASSERT_EQ(int(names.size()), P);
  for (int p = 0; p < P; ++p) EXPECT_EQ(names[size_t(p)], std::string(size_t(p), 'x') + "process " + std::to_string(p));

  std::vector<uint8_t> bytes;
  if (me == P - 1) bytes = {1, 2, 3, 250};
  fabric().broadcast(bytes, P - 1);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 250}));
  fabric().barrier();
}

// Member i in process i / 2: members 0, 1 in process 0, members 2, 3 in process 1.
TEST(Fabric, GroupTwoMembersPerProcess) {
  std::vector<int> layout;
  for (int i = 0; i < 4; ++i) layout.push_back((i / 2) % processes());
  check_all_ops(layout, "two per process");
}

TEST(Fabric, GroupOneMemberPerProcess) {
  std::vector<int> layout;
  for (int p = 0; p < processes(); ++p) layout.push_back(p);
  check_all_ops(layout, "one per process");
}

TEST(Fabric, GroupInterleaved) {
  std::vector<int> layout;
  for (int i = 0; i < 5; ++i) layout.push_back(i % processes());
  check_all_ops(layout, "interleaved");
}

// A group wholly in the last process: the others get no endpoint and take part in nothing.
TEST(Fabric, GroupInOneProcess) {
  check_all_ops({processes() - 1, processes() - 1, processes() - 1}, "in the last process");
}

// Several groups in use at once by the same threads (tags and communicators keep them apart).
TEST(Fabric, GroupsSideBySide) {
  const int P = processes();
  std::vector<int> layout;
  for (int i = 0; i < 2 * P; ++i) layout.push_back(i % P);
  Group a = make_group(layout, "a"), b = make_group(layout, "b");
  std::vector<float> seen(layout.size(), 0.0f);
  run_threads(local_members(a), [&](int m) {
    for (int i = 0; i < 50; ++i) {
      Tensor x = Tensor::host_f32({2}, {float(m), 1.0f});
      Tensor y = Tensor::host_f32({2}, {1.0f, float(i)});
      a[size_t(m)]->all_reduce(cpu(), x);
      b[size_t(m)]->all_reduce(cpu(), y, ReduceOp::max);
      seen[size_t(m)] = x.at(0) + y.at(1);
    }
  });
  const int size = 2 * P;
  for (int m = 0; m < size; ++m)
    if (a[size_t(m)]) {
      EXPECT_EQ(seen[size_t(m)], float(size) * float(size - 1) / 2 + 49.0f);
    }
}

// Member 0 (process 0) calls; member 1 (the last process) never does: member 0 fails naming it.
TEST(Fabric, MemberElsewhereNeverComes) {
  const int P = processes();
  if (P < 2) GTEST_SKIP() << "needs two processes";
  Group group = make_group({0, P - 1}, "lonely", 300);
  if (group[0]) {
    Tensor t = input(0, 8);
    std::string error;
    try {
      group[0]->all_reduce(cpu(), t);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("'lonely'"), std::string::npos) << error;
    EXPECT_NE(error.find("all_reduce #1"), std::string::npos) << error;
    EXPECT_NE(error.find("timed out"), std::string::npos) << error;
    EXPECT_NE(error.find("1 (process " + std::to_string(P - 1) + ")"), std::string::npos) << error;
  }
  fabric().barrier();
}

// Tensors from the first process to the last: the shapes travel separately (here: both sides
// know them), receives come in send order, and the sender never waits for the receiver: every
// send is done before the receiver starts receiving.
TEST(Fabric, ChannelBetweenProcesses) {
  const int P = processes(), from = 0, to = P - 1;
  auto channel = fabric().make_channel(from, to, here() == from ? &cpu() : nullptr, here() == to ? &cpu() : nullptr);
  auto back = fabric().make_channel(to, from, here() == to ? &cpu() : nullptr, here() == from ? &cpu() : nullptr);
  const bool sender = here() == from, receiver = here() == to;
  EXPECT_EQ(channel != nullptr, sender || receiver);
  const std::vector<Shape> shapes = {{3, 4}, {0}, {300000}, {7}, {2, 2, 2}};
  std::vector<actors::Parcel> parcels;
  if (sender)
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor t = random_normal(shapes[i], 900 + i);
      actors::Parcel p = channel->send(cpu(), t.view(shapes[i]));
      EXPECT_EQ(p.shape, shapes[i]);
      EXPECT_EQ(p.dtype, DType::f32);
      parcels.push_back(std::move(p));
    }
  fabric().barrier();  // the receiver has not posted anything yet
  if (receiver)
    for (size_t i = 0; i < shapes.size(); ++i) {
      actors::Parcel announced;
      if (sender) {
        announced = std::move(parcels[i]);  // one process: the same-process parcel
      } else {
        announced.shape = shapes[i];
        announced.dtype = DType::f32;
      }
      actors::Inbound in = channel->receive(cpu(), announced);
      actors::inbound_wait(cpu(), in);
      expect_same_bits(in.tensor, random_normal(shapes[i], 900 + i), str_cat("parcel ", i));
    }
  // And one back, an i32 tensor.
  if (receiver) {
    Tensor t = Tensor::host(DType::i32, {3});
    for (int e = 0; e < 3; ++e) t.data_as<int32_t>()[e] = 40 + e;
    parcels.clear();
    parcels.push_back(back->send(cpu(), t));
  }
  if (sender) {
    actors::Parcel announced;
    if (receiver) {
      announced = std::move(parcels[0]);
    } else {
      announced.shape = {3};
      announced.dtype = DType::i32;
    }
    actors::Inbound in = back->receive(cpu(), announced);
    for (int e = 0; e < 3; ++e) EXPECT_EQ(in.tensor.data_as<int32_t>()[e], 40 + e);
  }
  fabric().barrier();
}

TEST(Fabric, BadLayoutsAreErrors) {
  EXPECT_THROW(fabric().make_group({0, processes()}, {&cpu(), nullptr}), Error);  // no such process
  // The context of a member elsewhere must not be given (checked before any MPI call).
  std::vector<int> layout(2, here());
  EXPECT_THROW(fabric().make_group(layout, {&cpu(), nullptr}), Error);
}

}  // namespace
}  // namespace troupe::test
