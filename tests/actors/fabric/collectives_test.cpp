// In-process CPU collective groups (actors/fabric/collective_groups.hpp): every op on groups of 1-4
// threads, in place and out of place, against sums taken in member order on one thread, with
// every member holding the same bits; and the failures: a member that never comes (timeout),
// an abort, members calling different collectives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "actors/fabric/collective_groups.hpp"
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

}  // namespace
}  // namespace troupe::test
