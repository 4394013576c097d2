// NCCL groups from the Fabric (actors/fabric/fabric.hpp) against the CPU group on the same inputs:
// groups of 1 GPU, and of 2 and 4 when there are that many; f32 and bf16; in-place variants.
// Run as one process; under mpirun (the ctest entry collectives_cuda_test_np2) process p uses
// GPU p, and a group with one member per process and a channel between processes are tested
// too (skipped with fewer GPUs than processes). all_to_all and all_to_all_v (every dtype, uneven
// counts with zeros, counts through exchange_counts on the GPU) against outputs assembled on
// the host, bit for bit; abort() frees a member waiting to launch one.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "actors/fabric/fabric.hpp"
#include "tests/actors/fabric/all_to_all_cases.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::Fabric;
using Group = std::vector<std::unique_ptr<Collectives>>;

std::shared_ptr<Fabric> g_fabric;
class FabricEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_fabric = Fabric::init(); }
  void TearDown() override { g_fabric.reset(); }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

int gpu_count() {
#if TROUPE_HAVE_CUDA
  return troupe::cuda::device_count();
#else
  return 0;
#endif
}

// One context per GPU, made on first use (under mpirun each process touches only its own GPU).
const Context& gpu_ctx(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Context>> contexts;
  std::lock_guard<std::mutex> lock(mu);
  auto& ctx = contexts[device];
  if (!ctx) ctx = std::make_unique<Context>(Context::cuda(device));
  return *ctx;
}

// Member m's input, rounded through `dtype` (so the CPU reference sees the same values).
Tensor input(int member, int64_t n, DType dtype) {
  return round_through(random_normal({n}, 700 + uint64_t(member), 1.0f + 0.5f * float(member)), dtype);
}

struct Results {
  std::vector<Tensor> sum, max, scattered, gathered, cast;  // host f32, per member
};

// Every op on `group` (members on `contexts`, null elsewhere) with inputs rounded through
// `dtype`: stored as `dtype` on a GPU, as f32 on the CPU (the CPU group reduces f32).
Results run_ops(const Group& group, const std::vector<const Context*>& contexts, int64_t n, DType dtype) {
  const int size = int(group.size());
  Results r;
  for (auto* v : {&r.sum, &r.max, &r.scattered, &r.gathered, &r.cast}) v->resize(group.size());
  run_threads(local_members(group), [&](int m) {
    const Context& ctx = *contexts[size_t(m)];
    ctx.activate();
    Collectives& c = *group[size_t(m)];
    const DType stored = ctx.is_cuda() ? dtype : DType::f32;
    Tensor sum = to_device(ctx, input(m, n, dtype), stored);
    c.all_reduce(ctx, sum, ReduceOp::sum);
    Tensor max = to_device(ctx, input(m, n, dtype), stored);
    c.all_reduce(ctx, max, ReduceOp::max);
    Tensor full = to_device(ctx, input(m, size * n, dtype), stored);
    Tensor scattered = full.slice(m * n, {n});  // in place
    c.reduce_scatter(ctx, full, scattered);
    Tensor gathered = Tensor::zeros(ctx, stored, {size * n});
    Tensor part = gathered.slice(m * n, {n});  // in place
    copy(ctx, to_device(ctx, input(m, n, dtype), stored), part);
    c.all_gather(ctx, part, gathered);
    Tensor cast = to_device(ctx, input(m, n, dtype), stored);
    c.broadcast(ctx, cast, size - 1);
    r.sum[size_t(m)] = to_host_f32(ctx, sum);
    r.max[size_t(m)] = to_host_f32(ctx, max);
    r.scattered[size_t(m)] = to_host_f32(ctx, scattered);
    r.gathered[size_t(m)] = to_host_f32(ctx, gathered);
    r.cast[size_t(m)] = to_host_f32(ctx, cast);
    ctx.synchronize();
  });
  return r;
}

// The CPU group's results on the same (rounded) inputs, all members in this process.
Results cpu_reference(int size, int64_t n, DType dtype) {
  Group group = actors::make_cpu_group(size);
  std::vector<const Context*> contexts(size_t(size), &cpu());
  return run_ops(group, contexts, n, dtype);
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  if (tol == 0) {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0) << what;
  } else {
    EXPECT_LT(rel_error(got, want), tol) << what;
  }
}

// Compares the members of this process; sums within `tol` (NCCL adds in its own order, and
// in bf16 it rounds each partial sum), the rest exactly.
void compare(const Group& group, const Results& got, const Results& want, DType dtype, const std::string& at) {
  const double tol = dtype == DType::f32 ? 1e-6 : 2e-2;
  for (size_t m = 0; m < group.size(); ++m) {
    if (!group[m]) continue;
    const std::string who = at + " member " + std::to_string(m);
    expect_close(got.sum[m], want.sum[m], tol, who + " all_reduce sum");
    expect_close(got.max[m], want.max[m], 0, who + " all_reduce max");
    expect_close(got.scattered[m], want.scattered[m], tol, who + " reduce_scatter");
    expect_close(got.gathered[m], want.gathered[m], 0, who + " all_gather");
    expect_close(got.cast[m], want.cast[m], 0, who + " broadcast");
  }
}

// all_to_all (equal splits) and all_to_all_v on `group` (members on `contexts`, null
// elsewhere), every dtype, checked on the members in this process.
void check_all_to_all(const Group& group, const std::vector<const Context*>& contexts, const std::string& name) {
  const int size = int(group.size());
  std::vector<AllToAllCase> cases = uneven_cases(true);
  for (int64_t n : {int64_t(0), int64_t(5), int64_t(1) << 18}) cases.push_back(equal_split(n));
  for (const AllToAllCase& c : cases)
    for (DType dtype : all_to_all_dtypes()) {
      const bool equal = c.name.rfind("equal", 0) == 0;
      const std::string at = str_cat(name, " ", c.name, " ", dtype_name(dtype));
      std::vector<Tensor> got(group.size());
      std::vector<std::vector<int64_t>> recv(group.size());
      run_threads(local_members(group), [&](int m) {
        const Context& ctx = *contexts[size_t(m)];
        ctx.activate();
        Collectives& comm = *group[size_t(m)];
        const Tensor host_in = c.input(size, m, dtype);
        const Tensor in = Tensor::empty(ctx, dtype, host_in.shape());
        copy(ctx, host_in, in);
        const std::vector<int64_t> send = c.send_counts(size, m);
        recv[size_t(m)] = exchange_counts(ctx, comm, send);
        int64_t rows = 0;
        for (int64_t k : recv[size_t(m)]) rows += k;
        const Tensor out = Tensor::zeros(ctx, dtype, {rows, c.width});
        if (equal)
          comm.all_to_all(ctx, in.view({in.numel()}), out);
        else
          comm.all_to_all_v(ctx, in, send, out, recv[size_t(m)]);
        got[size_t(m)] = Tensor::host(dtype, {rows, c.width});
        copy(ctx, out, got[size_t(m)]);
        ctx.synchronize();
      });
      for (int m = 0; m < size; ++m) {
        if (!group[size_t(m)]) continue;
        EXPECT_EQ(recv[size_t(m)], c.recv_counts(size, m)) << at << " member " << m;
        EXPECT_TRUE(same_bits(got[size_t(m)], c.expected(size, m, dtype))) << at << " member " << m;
      }
    }
}

TEST(NcclGroup, AllToAllOneProcess) {
  if (g_fabric->processes() > 1) GTEST_SKIP() << "one-process layouts";
  if (gpu_count() < 1) GTEST_SKIP() << "needs a GPU";
  for (int size : {1, 2, 4}) {
    if (size > gpu_count()) continue;
    std::vector<const Context*> contexts;
    for (int d = 0; d < size; ++d) contexts.push_back(&gpu_ctx(d));
    actors::GroupOptions options;
    options.name = "gpus " + std::to_string(size);
    Group group = g_fabric->make_group(std::vector<int>(size_t(size), 0), contexts, options);
    check_all_to_all(group, contexts, options.name);
  }
}

// Member 0 waits for member 1 to launch an all-to-all together (launch_together); member 1
// never comes. abort() frees member 0 with troupe::Error long before the group's timeout.
TEST(NcclGroup, AbortReleasesAMemberWaitingInAllToAll) {
  if (g_fabric->processes() > 1 || gpu_count() < 2) GTEST_SKIP() << "needs one process and two GPUs";
  for (bool v : {false, true}) {
    actors::GroupOptions options;
    options.name = "abandoned";
    options.launch_together = true;
    options.timeout = std::chrono::minutes(10);
    Group group = g_fabric->make_group({0, 0}, {&gpu_ctx(0), &gpu_ctx(1)}, options);
    const Context& ctx = gpu_ctx(0);
    const Tensor in = Tensor::zeros(ctx, DType::bf16, {4, 3}), out = Tensor::zeros(ctx, DType::bf16, {4, 3});
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    std::thread waiter([&] {
      ctx.activate();
      try {
        if (v)
          group[0]->all_to_all_v(ctx, in, {1, 3}, out, {1, 3});
        else
          group[0]->all_to_all(ctx, in, out);
      } catch (const Error& e) {
        error = e.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    group[1]->abort();
    waiter.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
    EXPECT_NE(error.find("aborted"), std::string::npos) << error;
    EXPECT_NE(error.find(v ? "all_to_all_v" : "all_to_all"), std::string::npos) << error;
    EXPECT_THROW(group[0]->all_to_all(ctx, in, out), Error);  // and every call after it
  }
}

TEST(NcclGroup, OneProcessMatchesCpuGroup) {
  if (g_fabric->processes() > 1) GTEST_SKIP() << "one-process layouts";
  for (int size : {1, 2, 4}) {
    if (size > gpu_count()) continue;
    std::vector<const Context*> contexts;
    for (int d = 0; d < size; ++d) contexts.push_back(&gpu_ctx(d));
    actors::GroupOptions options;
    options.name = "gpus " + std::to_string(size);
    Group group = g_fabric->make_group(std::vector<int>(size_t(size), 0), contexts, options);
    for (DType dtype : {DType::f32, DType::bf16})
      for (int64_t n : {int64_t(1), int64_t(1031), int64_t(1) << 20}) {
        const std::string at = str_cat(options.name, " ", dtype_name(dtype), " n ", n);
        compare(group, run_ops(group, contexts, n, dtype), cpu_reference(size, n, dtype), dtype, at);
      }
  }
}

TEST(NcclGroup, WrongDeviceIsAnError) {
  if (g_fabric->processes() > 1 || gpu_count() < 2) GTEST_SKIP() << "needs one process and two GPUs";
  Group group = g_fabric->make_group({0, 0}, {&gpu_ctx(0), &gpu_ctx(1)});
  Tensor t = Tensor::zeros(gpu_ctx(1), DType::f32, {4});
  EXPECT_THROW(group[0]->all_reduce(gpu_ctx(1), t), Error);  // member 0 lives on cuda:0
}

// Under mpirun: member p in process p on GPU p.
TEST(NcclGroup, OneMemberPerProcess) {
  const int P = g_fabric->processes(), me = g_fabric->process();
  if (P < 2 || gpu_count() < P) GTEST_SKIP() << "needs mpirun and a GPU per process";
  std::vector<int> layout;
  std::vector<const Context*> contexts;
  for (int p = 0; p < P; ++p) {
    layout.push_back(p);
    contexts.push_back(p == me ? &gpu_ctx(p) : nullptr);
  }
  Group group = g_fabric->make_group(layout, contexts);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t n = 4099;
    compare(group, run_ops(group, contexts, n, dtype), cpu_reference(P, n, dtype), dtype,
            str_cat("one per process ", dtype_name(dtype)));
  }
  check_all_to_all(group, contexts, "one per process");
}

TEST(NcclChannel, BetweenProcesses) {
  const int P = g_fabric->processes(), me = g_fabric->process();
  if (P < 2 || gpu_count() < P) GTEST_SKIP() << "needs mpirun and a GPU per process";
  const int from = 0, to = P - 1;
  const Context* from_ctx = me == from ? &gpu_ctx(from) : nullptr;
  const Context* to_ctx = me == to ? &gpu_ctx(to) : nullptr;
  auto channel = g_fabric->make_channel(from, to, from_ctx, to_ctx);
  const std::vector<Shape> shapes = {{3, 5}, {1 << 18}, {7}};
  if (me == from) {
    from_ctx->activate();
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor t = actors::buffer_alloc(*from_ctx, DType::bf16, shapes[i]);
      copy(*from_ctx, to_device(*from_ctx, random_normal(shapes[i], 40 + i), DType::bf16), t);
      channel->send(*from_ctx, t);  // the parcel's shape and dtype travel separately
    }
    from_ctx->synchronize();
  }
  if (me == to) {
    to_ctx->activate();
    for (size_t i = 0; i < shapes.size(); ++i) {
      actors::Parcel announced;
      announced.shape = shapes[i];
      announced.dtype = DType::bf16;
      actors::Inbound in = channel->receive(*to_ctx, announced);
      actors::inbound_wait(*to_ctx, in);
      const Tensor got = to_host_f32(*to_ctx, in.tensor);
      actors::buffer_free(*to_ctx, in.tensor);
      const Tensor want = round_through(random_normal(shapes[i], 40 + i), DType::bf16);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << "parcel " << i;
    }
    to_ctx->synchronize();
  }
  g_fabric->barrier();
}

}  // namespace
}  // namespace troupe::test
