// In-process CPU collective groups (actors/fabric/collective_groups.hpp): every op on groups of 1-4
// threads, in place and out of place, against sums taken in member order on one thread, with
// every member holding the same bits; all-to-all (equal and uneven splits, every dtype) against
// outputs assembled on the host; and the failures: a member that never comes (timeout), an
// abort (also of members waiting in an all-to-all), members calling different collectives,
// all-to-all counts that disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "actors/fabric/collective_groups.hpp"
#include "tests/actors/fabric/all_to_all_cases.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::make_cpu_group;
using Group = std::vector<std::unique_ptr<Collectives>>;

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what;
}

Tensor input(int rank, int64_t n) { return random_normal({n}, 1000 + uint64_t(rank), 1.0f + float(rank)); }

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::host(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// The reduction of every member's input, element by element in member order.
Tensor reference_reduce(int size, int64_t n, ReduceOp op) {
  Tensor out = copy_of(input(0, n));
  for (int r = 1; r < size; ++r) {
    const Tensor x = input(r, n);
    for (int64_t e = 0; e < n; ++e)
      out.at(e) = op == ReduceOp::sum ? out.at(e) + x.at(e) : std::max(out.at(e), x.at(e));
  }
  return out;
}

constexpr int64_t kLengths[] = {0, 1, 5, 1031};

TEST(CpuGroup, AllReduce) {
  for (int size = 1; size <= 4; ++size)
    for (int64_t n : kLengths)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        Group group = make_cpu_group(size);
        std::vector<Tensor> t(static_cast<size_t>(size));
        run_threads(size, [&](int r) {
          EXPECT_EQ(group[size_t(r)]->rank(), r);
          EXPECT_EQ(group[size_t(r)]->size(), size);
          t[size_t(r)] = input(r, n);
          group[size_t(r)]->all_reduce(cpu(), t[size_t(r)], op);
        });
        const Tensor want = reference_reduce(size, n, op);
        for (int r = 0; r < size; ++r)
          expect_same_bits(t[size_t(r)], want, str_cat("size ", size, " n ", n, " member ", r));
      }
}

TEST(CpuGroup, AllReduceIntegers) {
  const int size = 3;
  Group group = make_cpu_group(size);
  std::vector<Tensor> a(size), b(size);
  run_threads(size, [&](int r) {
    a[size_t(r)] = Tensor::host(DType::i32, {4});
    b[size_t(r)] = Tensor::host(DType::i64, {2});
    for (int e = 0; e < 4; ++e) a[size_t(r)].data_as<int32_t>()[e] = (r + 1) * (e - 2);
    b[size_t(r)].data_as<int64_t>()[0] = int64_t(1) << (40 + r);
    b[size_t(r)].data_as<int64_t>()[1] = -r;
    group[size_t(r)]->all_reduce(cpu(), a[size_t(r)], ReduceOp::max);
    group[size_t(r)]->all_reduce(cpu(), b[size_t(r)], ReduceOp::sum);
  });
  for (int r = 0; r < size; ++r) {
    const int32_t* x = a[size_t(r)].data_as<int32_t>();
    EXPECT_EQ(x[0], -2);  // max over r of (r + 1) * -2
    EXPECT_EQ(x[1], -1);
    EXPECT_EQ(x[2], 0);
    EXPECT_EQ(x[3], 3);
    EXPECT_EQ(b[size_t(r)].data_as<int64_t>()[0], (int64_t(1) << 40) + (int64_t(1) << 41) + (int64_t(1) << 42));
    EXPECT_EQ(b[size_t(r)].data_as<int64_t>()[1], -3);
  }
}

TEST(CpuGroup, MaxPropagatesNaN) {
  Group group = make_cpu_group(2);
  std::vector<Tensor> t(2);
  run_threads(2, [&](int r) {
    t[size_t(r)] = Tensor::host_f32({2}, {r == 1 ? std::nanf("") : 1.0f, 2.0f});
    group[size_t(r)]->all_reduce(cpu(), t[size_t(r)], ReduceOp::max);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::isnan(t[size_t(r)].at(0)));
    EXPECT_EQ(t[size_t(r)].at(1), 2.0f);
  }
}

TEST(CpuGroup, ReduceScatter) {
  for (int size = 1; size <= 4; ++size)
    for (int64_t n : kLengths)
      for (bool in_place : {false, true}) {
        Group group = make_cpu_group(size);
        std::vector<Tensor> out(static_cast<size_t>(size));
        run_threads(size, [&](int r) {
          const Tensor in = input(r, size * n);
          out[size_t(r)] = in_place ? in.slice(r * n, {n}) : Tensor::host(DType::f32, {n});
          group[size_t(r)]->reduce_scatter(cpu(), in, out[size_t(r)]);
        });
        const Tensor full = reference_reduce(size, size * n, ReduceOp::sum);
        for (int r = 0; r < size; ++r)
          expect_same_bits(out[size_t(r)], full.slice(r * n, {n}),
                           str_cat("size ", size, " n ", n, " in place ", in_place, " member ", r));
      }
}

TEST(CpuGroup, AllGather) {
  for (int size = 1; size <= 4; ++size)
    for (int64_t n : kLengths)
      for (bool in_place : {false, true}) {
        Group group = make_cpu_group(size);
        std::vector<Tensor> out(static_cast<size_t>(size));
        run_threads(size, [&](int r) {
          out[size_t(r)] = Tensor::host(DType::f32, {size * n});
          Tensor in = input(r, n);
          if (in_place) {
            Tensor part = out[size_t(r)].slice(r * n, {n});
            std::memcpy(part.data(), in.data(), in.nbytes());
            in = part;
          }
          group[size_t(r)]->all_gather(cpu(), in, out[size_t(r)]);
        });
        for (int r = 0; r < size; ++r)
          for (int k = 0; k < size; ++k)
            expect_same_bits(out[size_t(r)].slice(k * n, {n}), input(k, n),
                             str_cat("size ", size, " n ", n, " in place ", in_place, " member ", r, " part ", k));
      }
}

TEST(CpuGroup, Broadcast) {
  for (int size = 1; size <= 4; ++size)
    for (int root = 0; root < size; ++root) {
      Group group = make_cpu_group(size);
      std::vector<Tensor> t(static_cast<size_t>(size));
      run_threads(size, [&](int r) {
        t[size_t(r)] = input(r, 77);
        group[size_t(r)]->broadcast(cpu(), t[size_t(r)], root);
      });
      for (int r = 0; r < size; ++r)
        expect_same_bits(t[size_t(r)], input(root, 77), str_cat("root ", root, " member ", r));
    }
}

// Many calls in a row reuse the barrier's generations; a mix of ops and sizes catches a member
// running ahead into the next step while another still reads.
TEST(CpuGroup, ManyCallsInARow) {
  const int size = 4;
  Group group = make_cpu_group(size);
  std::vector<std::vector<float>> seen(size);
  run_threads(size, [&](int r) {
    Collectives& c = *group[size_t(r)];
    for (int i = 0; i < 300; ++i) {
      Tensor t = Tensor::host_f32({3}, {float(r + i), float(r * i), 1.0f});
      c.all_reduce(cpu(), t);
      Tensor g = Tensor::host(DType::f32, {size * 3});
      c.all_gather(cpu(), t, g);
      c.broadcast(cpu(), g, i % size);
      c.reduce_scatter(cpu(), g, t);
      seen[size_t(r)].push_back(t.at(0));
    }
  });
  for (int i = 0; i < 300; ++i) {
    // all_reduce: sum_r (r + i) = 6 + 4i; the reduce_scatter of 4 equal copies multiplies by 4.
    EXPECT_EQ(seen[0][size_t(i)], 4.0f * float(6 + 4 * i)) << i;
    for (int r = 1; r < size; ++r) EXPECT_EQ(seen[size_t(r)][size_t(i)], seen[0][size_t(i)]);
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuGroup, TimeoutNamesCollectiveAndMissingMembers) {
  actors::GroupOptions options;
  options.name = "dp group 7";
  options.timeout = std::chrono::milliseconds(200);
  Group group = make_cpu_group(4, options);
  std::vector<std::string> errors(2);
  // Members 0 and 1 arrive; 2 and 3 never do.
  run_threads(2, [&](int r) {
    Tensor t = input(r, 8);
    errors[size_t(r)] = error_of([&] { group[size_t(r)]->all_reduce(cpu(), t); });
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("dp group 7"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce #1"), std::string::npos) << e;
    EXPECT_NE(e.find("timed out"), std::string::npos) << e;
    EXPECT_NE(e.find("never arrived: 2, 3"), std::string::npos) << e;
  }
  // The group stays broken: a late member fails at once.
  Tensor t = input(2, 8);
  EXPECT_NE(error_of([&] { group[2]->all_reduce(cpu(), t); }).find("timed out"), std::string::npos);
}

TEST(CpuGroup, AbortReleasesWaiters) {
  Group group = make_cpu_group(3);  // default timeout: minutes
  std::string error;
  std::thread waiter([&] {
    Tensor t = input(0, 8);
    error = error_of([&] { group[0]->broadcast(cpu(), t, 0); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group[2]->abort();
  waiter.join();
  EXPECT_NE(error.find("aborted"), std::string::npos) << error;
  Tensor t = input(1, 8);
  EXPECT_NE(error_of([&] { group[1]->all_reduce(cpu(), t); }).find("aborted"), std::string::npos);
}

TEST(CpuGroup, MembersCallingDifferentCollectivesFail) {
  Group group = make_cpu_group(2);
  std::vector<std::string> errors(2);
  run_threads(2, [&](int r) {
    Tensor t = input(r, 8);
    errors[size_t(r)] = error_of([&] {
      if (r == 0)
        group[0]->all_reduce(cpu(), t);
      else
        group[1]->broadcast(cpu(), t, 0);
    });
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("different collectives"), std::string::npos) << e;
}

TEST(CpuGroup, BadArgumentsFailEveryMember) {
  Group group = make_cpu_group(2);
  std::vector<std::string> errors(2);
  run_threads(2, [&](int r) {
    Tensor in = input(r, r == 0 ? 8 : 7);  // member 1 passes the wrong length
    Tensor out = Tensor::host(DType::f32, {4});
    errors[size_t(r)] = error_of([&] { group[size_t(r)]->reduce_scatter(cpu(), in, out); });
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("must hold 2 x out"), std::string::npos) << e;
}

constexpr int kAllToAllSizes[] = {1, 2, 4};

// One group per size runs every case in a row (generations reused, steps of several lengths).
TEST(CpuGroup, AllToAll) {
  for (int size : kAllToAllSizes) {
    Group group = make_cpu_group(size);
    for (DType dtype : all_to_all_dtypes())
      for (int64_t n : kLengths) {
        const AllToAllCase c = equal_split(n);
        std::vector<Tensor> out(static_cast<size_t>(size));
        run_threads(size, [&](int r) {
          const Tensor in = c.input(size, r, dtype).view({size * n});  // any shape with size * n elements
          out[size_t(r)] = Tensor::host(dtype, {size, n});
          group[size_t(r)]->all_to_all(cpu(), in, out[size_t(r)]);
        });
        for (int r = 0; r < size; ++r)
          EXPECT_TRUE(same_bits(out[size_t(r)], c.expected(size, r, dtype)))
              << "size " << size << " " << dtype_name(dtype) << " n " << n << " member " << r;
      }
  }
}

// The counts go through exchange_counts first, as a token dispatcher's would.
TEST(CpuGroup, AllToAllV) {
  for (int size : kAllToAllSizes) {
    Group group = make_cpu_group(size);
    for (const AllToAllCase& c : uneven_cases(false))
      for (DType dtype : all_to_all_dtypes()) {
        const std::string at = str_cat("size ", size, " ", c.name, " ", dtype_name(dtype));
        std::vector<Tensor> out(static_cast<size_t>(size));
        std::vector<std::vector<int64_t>> recv(static_cast<size_t>(size));
        run_threads(size, [&](int r) {
          Collectives& comm = *group[size_t(r)];
          const std::vector<int64_t> send = c.send_counts(size, r);
          recv[size_t(r)] = exchange_counts(cpu(), comm, send);
          int64_t rows = 0;
          for (int64_t k : recv[size_t(r)]) rows += k;
          out[size_t(r)] = Tensor::host(dtype, {rows, c.width});
          std::memset(out[size_t(r)].data(), 0xA5, out[size_t(r)].nbytes());
          comm.all_to_all_v(cpu(), c.input(size, r, dtype), send, out[size_t(r)], recv[size_t(r)]);
        });
        for (int r = 0; r < size; ++r) {
          EXPECT_EQ(recv[size_t(r)], c.recv_counts(size, r)) << at << " member " << r;
          EXPECT_TRUE(same_bits(out[size_t(r)], c.expected(size, r, dtype))) << at << " member " << r;
        }
      }
  }
}

// Tokens dispatched and combined back (the inverse all_to_all_v) return to where they started,
// also when the rows are [tokens, 2, H] (the width counts every dimension after the first).
TEST(CpuGroup, AllToAllVRoundTrip) {
  const int size = 3;
  const AllToAllCase c = uneven_cases(false)[1];
  Group group = make_cpu_group(size);
  std::vector<Tensor> back(size);
  run_threads(size, [&](int r) {
    Collectives& comm = *group[size_t(r)];
    const std::vector<int64_t> send = c.send_counts(size, r), recv = exchange_counts(cpu(), comm, send);
    const Tensor in = c.input(size, r, DType::bf16);
    int64_t rows = 0;
    for (int64_t k : recv) rows += k;
    const Tensor routed = Tensor::host(DType::bf16, {rows, 1, c.width});
    comm.all_to_all_v(cpu(), in, send, routed, recv);
    back[size_t(r)] = Tensor::host(DType::bf16, {in.dim(0), c.width});
    comm.all_to_all_v(cpu(), routed, recv, back[size_t(r)], send);
  });
  for (int r = 0; r < size; ++r) EXPECT_TRUE(same_bits(back[size_t(r)], c.input(size, r, DType::bf16))) << r;
}

// Member 1 expects one row fewer from member 0 than member 0 sends: both ends fail, naming the
// counts, and so does the member whose own counts are fine (member 2).
TEST(CpuGroup, AllToAllVCountsThatDisagreeFailEveryMember) {
  const int size = 3;
  const AllToAllCase c = uneven_cases(false)[2];  // member 0 sends member 1 seven rows
  Group group = make_cpu_group(size);
  std::vector<std::string> errors(size);
  run_threads(size, [&](int r) {
    std::vector<int64_t> recv = c.recv_counts(size, r);
    if (r == 1) recv[0] -= 1;
    int64_t rows = 0;
    for (int64_t k : recv) rows += k;
    const Tensor out = Tensor::host(DType::f32, {rows, c.width});
    errors[size_t(r)] = error_of([&] {
      group[size_t(r)]->all_to_all_v(cpu(), c.input(size, r, DType::f32), c.send_counts(size, r), out, recv);
    });
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("all_to_all_v"), std::string::npos) << e;
    EXPECT_NE(e.find("exchange_counts"), std::string::npos) << e;
  }
  EXPECT_NE(errors[0].find("member 1 sends 0 rows here and expects 6, this member's recv_counts[1] is 0 and "
                           "send_counts[1] is 7"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("member 0 sends 7 rows here and expects 0, this member's recv_counts[0] is 6"),
            std::string::npos)
      << errors[1];
}

TEST(CpuGroup, AllToAllBadArgumentsFail) {
  Group group = make_cpu_group(1);
  Collectives& comm = *group[0];
  const Tensor t = Tensor::host(DType::f32, {8});
  EXPECT_NE(error_of([&] { comm.all_to_all(cpu(), t, t); }).find("overlaps"), std::string::npos);
  Group two = make_cpu_group(2);
  std::vector<std::string> errors(2);
  run_threads(2, [&](int r) {
    const Tensor in = Tensor::host(DType::i32, {3, 2}), out = Tensor::host(DType::i32, {3, 2});
    errors[size_t(r)] = error_of([&] { two[size_t(r)]->all_to_all_v(cpu(), in, {1, 1}, out, {1, 2}); });
  });
  EXPECT_NE(errors[0].find("send_counts sum to 2 rows"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("send_counts sum to 2 rows"), std::string::npos) << errors[1];
  EXPECT_NE(error_of([&] {
              exchange_counts(cpu(), comm, {1, 2});
            }).find("2 send counts for a group of 1"),
            std::string::npos);
}

// Members 0 and 1 wait in an all-to-all for member 2, which never comes; abort() from another
// thread frees them with troupe::Error (the timeout is minutes away).
TEST(CpuGroup, AbortReleasesMembersWaitingInAllToAll) {
  for (bool v : {false, true}) {
    const int size = 3;
    Group group = make_cpu_group(size);
    std::vector<std::string> errors(2);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      group[2]->abort();
    });
    const auto start = std::chrono::steady_clock::now();
    run_threads(2, [&](int r) {
      const AllToAllCase c = v ? uneven_cases(false)[0] : equal_split(5);
      const Tensor in = c.input(size, r, DType::i64);
      const Tensor out = Tensor::host(DType::i64, {c.expected(size, r, DType::i64).dim(0), c.width});
      errors[size_t(r)] = error_of([&] {
        if (v)
          group[size_t(r)]->all_to_all_v(cpu(), in, c.send_counts(size, r), out, c.recv_counts(size, r));
        else
          group[size_t(r)]->all_to_all(cpu(), in, out);
      });
    });
    aborter.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    for (const std::string& e : errors) EXPECT_NE(e.find("member 2 aborted the group"), std::string::npos) << e;
  }
}

// A Collectives that implements neither all-to-all (a test double) says so instead of
// pretending.
TEST(Collectives, AllToAllNotImplementedIsAnError) {
  struct OnlyReduces final : Collectives {  // a group of one: every reduction leaves its tensor as it is
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void all_reduce(const Context&, const Tensor&, ReduceOp) override {}
    void reduce_scatter(const Context&, const Tensor&, const Tensor&) override {}
    void all_gather(const Context&, const Tensor&, const Tensor&) override {}
    void broadcast(const Context&, const Tensor&, int) override {}
  } comm;
  const Tensor in = Tensor::host(DType::f32, {2}), out = Tensor::host(DType::f32, {2});
  EXPECT_NE(error_of([&] { comm.all_to_all(cpu(), in, out); }).find("does not implement"), std::string::npos);
  EXPECT_NE(error_of([&] { comm.all_to_all_v(cpu(), in, {2}, out, {2}); }).find("does not implement"),
            std::string::npos);
}

}  // namespace
}  // namespace troupe::test
