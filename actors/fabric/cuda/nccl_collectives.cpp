// NCCL collective groups: one communicator per member, every op enqueued on the calling
// member's context stream (work enqueued afterwards sees the result; the host does not wait).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/fabric/cuda/cuda_helpers.hpp"
#include "actors/fabric/cuda/nccl_group.hpp"

namespace troupe::actors::cuda {

using troupe::cuda::stream_of;

namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  TROUPE_FAIL("NCCL: dtype ", int(d));
}

// The group's members in this process meet here before each collective (launch_together).
class LaunchBarrier {
 public:
  LaunchBarrier(int members, std::chrono::milliseconds timeout) : members_(members), timeout_(timeout) {}
  // Returns once every local member has arrived; throws when the group is aborted meanwhile or
  // the others do not come within the group's timeout.
  void arrive(const std::string& where) {
    std::unique_lock lock(mu_);
    TROUPE_CHECK(!aborted_, where, ": the group was aborted");
    const uint64_t generation = generation_;
    if (++arrived_ == members_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool met = cv_.wait_for(lock, timeout_, [&] { return aborted_ || generation_ != generation; });
    TROUPE_CHECK(met, where, ": the group's other members in this process did not reach it within ",
                 std::chrono::duration<double>(timeout_).count(), " s");
    TROUPE_CHECK(generation_ != generation, where, ": the group was aborted");
  }
  void abort() {
    {
      std::lock_guard lock(mu_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  const int members_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

// The communicators of the group's members in this process, shared by their endpoints.
struct NcclGroup {
  std::string name;
  int size = 0;
  std::vector<ncclComm_t> comms;          // per member, null elsewhere
  std::vector<int> devices;               // per member, -1 elsewhere
  std::unique_ptr<LaunchBarrier> launch;  // launch_together with several local members, else null
  std::atomic<bool> aborted{false};

  ~NcclGroup() {
    if (aborted) return;  // aborted communicators are gone already
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  }
  void abort() {
    if (aborted.exchange(true)) return;
    if (launch) launch->abort();
    for (ncclComm_t c : comms)
      if (c) ncclCommAbort(c);
  }
};

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(std::shared_ptr<NcclGroup> group, int rank)
      : group_(std::move(group)),
        rank_(rank),
        comm_(group_->comms[size_t(rank)]),
        device_(group_->devices[size_t(rank)]) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  void all_reduce(const Context& ctx, const Tensor& t, ReduceOp op) override {
    expect(ctx, "all_reduce", "t", t);
    enter("all_reduce", t);
    TROUPE_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), size_t(t.numel()), nccl_type(t.dtype()),
                                    op == ReduceOp::sum ? ncclSum : ncclMax, comm_, stream_of(ctx)),
                      where("all_reduce", t));
  }

  // NCCL's in-place forms are exactly the interface's aliasing: out = in + rank * n.
  void reduce_scatter(const Context& ctx, const Tensor& in, const Tensor& out) override {
    expect(ctx, "reduce_scatter", "in", in);
    expect(ctx, "reduce_scatter", "out", out);
    TROUPE_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size(), where("reduce_scatter", in), ": out ",
                 out.str(), " must hold 1/", size(), " of it");
    enter("reduce_scatter", in);
    TROUPE_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), size_t(out.numel()), nccl_type(in.dtype()), ncclSum,
                                        comm_, stream_of(ctx)),
                      where("reduce_scatter", in));
  }

  void all_gather(const Context& ctx, const Tensor& in, const Tensor& out) override {
    expect(ctx, "all_gather", "in", in);
    expect(ctx, "all_gather", "out", out);
    TROUPE_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size(), where("all_gather", in), ": out ",
                 out.str(), " must hold ", size(), " of it");
    enter("all_gather", in);
    TROUPE_NCCL_CHECK(
        ncclAllGather(in.data(), out.data(), size_t(in.numel()), nccl_type(in.dtype()), comm_, stream_of(ctx)),
        where("all_gather", in));
  }

  void broadcast(const Context& ctx, const Tensor& t, int root) override {
    expect(ctx, "broadcast", "t", t);
    TROUPE_CHECK(root >= 0 && root < size(), where("broadcast", t), ": root ", root);
    enter("broadcast", t);
    TROUPE_NCCL_CHECK(
        ncclBroadcast(t.data(), t.data(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_, stream_of(ctx)),
        where("broadcast", t));
  }

  // A send and a receive per member, self included, fused by NCCL into one launch.
  void all_to_all(const Context& ctx, const Tensor& in, const Tensor& out) override {
    expect(ctx, "all_to_all", "in", in);
    expect(ctx, "all_to_all", "out", out);
    TROUPE_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() && in.numel() % size() == 0,
                 where("all_to_all", in), ": out ", out.str(), " must match it, and both hold ", size(),
                 " equal parts");
    expect_apart("all_to_all", in, out);
    const int64_t n = in.numel() / size();
    const auto members = static_cast<size_t>(size());
    const std::vector<int64_t> counts(members, 1);
    std::vector<int64_t> begins(members);
    for (size_t q = 0; q < members; ++q) begins[q] = int64_t(q);
    send_recv("all_to_all", ctx, in, counts, begins, out, counts, begins, n);
  }

  void all_to_all_v(const Context& ctx, const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts) override {
    expect(ctx, "all_to_all_v", "in", in);
    expect(ctx, "all_to_all_v", "out", out);
    TROUPE_CHECK(in.ndim() >= 1 && out.ndim() >= 1, where("all_to_all_v", in), ": in and out ", out.str(),
                 " must have rows (a first dimension)");
    const int64_t width = shape_numel(Shape(in.shape().begin() + 1, in.shape().end()));
    TROUPE_CHECK(in.dtype() == out.dtype() && width == shape_numel(Shape(out.shape().begin() + 1, out.shape().end())),
                 where("all_to_all_v", in), ": out ", out.str(), " must have rows of its width and dtype");
    expect_apart("all_to_all_v", in, out);
    const std::vector<int64_t> send_begin = row_begins("send_counts", send_counts, in);
    const std::vector<int64_t> recv_begin = row_begins("recv_counts", recv_counts, out);
    send_recv("all_to_all_v", ctx, in, send_counts, send_begin, out, recv_counts, recv_begin, width);
  }

  // Releases members blocked in NCCL (their kernels stop; later calls fail).
  void abort() override { group_->abort(); }

 private:
  std::string where(const char* op, const Tensor& t) const {
    return str_cat("group '", group_->name, "' member ", rank_, " (cuda:", device_, "): ", op, " of ", t.str());
  }
  void expect(const Context& ctx, const char* op, const char* arg, const Tensor& t) const {
    TROUPE_CHECK(!group_->aborted, "group '", group_->name, "' member ", rank_, ": ", op, " after an abort");
    TROUPE_CHECK(ctx.is_cuda() && ctx.device_index() == device_, "group '", group_->name, "' member ", rank_, ": ", op,
                 " from a context on ", ctx.is_cuda() ? "cuda:" + std::to_string(ctx.device_index()) : "the CPU",
                 ", the member is on cuda:", device_);
    TROUPE_CHECK(t.defined() && t.is_cuda() && t.device_index() == device_, "group '", group_->name, "' member ", rank_,
                 ": ", op, ": ", arg, " ", t.defined() ? t.str() : "(undefined)", " is not on cuda:", device_);
  }
  // Rows [begin[q], begin[q] + count[q]) of in go to member q and arrive at those of out
  // (rows of `width` elements). Pairs with nothing to move post nothing (both ends agree).
  void send_recv(const char* op, const Context& ctx, const Tensor& in, const std::vector<int64_t>& send_counts,
                 const std::vector<int64_t>& send_begin, const Tensor& out, const std::vector<int64_t>& recv_counts,
                 const std::vector<int64_t>& recv_begin, int64_t width) const {
    const ncclDataType_t type = nccl_type(in.dtype());
    const int64_t row = width * int64_t(dtype_size(in.dtype()));
    const auto* src = static_cast<const std::byte*>(in.data());
    auto* dst = static_cast<std::byte*>(out.data());
    const cudaStream_t stream = stream_of(ctx);
    enter(op, in);
    TROUPE_NCCL_CHECK(ncclGroupStart(), where(op, in));
    try {
      for (int q = 0; q < size(); ++q) {
        const auto sends = size_t(send_counts[size_t(q)] * width), recvs = size_t(recv_counts[size_t(q)] * width);
        if (sends > 0)
          TROUPE_NCCL_CHECK(ncclSend(src + send_begin[size_t(q)] * row, sends, type, q, comm_, stream), where(op, in),
                            ": sending ", send_counts[size_t(q)], " rows to member ", q);
        if (recvs > 0)
          TROUPE_NCCL_CHECK(ncclRecv(dst + recv_begin[size_t(q)] * row, recvs, type, q, comm_, stream), where(op, in),
                            ": receiving ", recv_counts[size_t(q)], " rows from member ", q);
      }
    } catch (...) {
      (void)ncclGroupEnd();  // close the group this thread opened; the first error is the one to report
      throw;
    }
    TROUPE_NCCL_CHECK(ncclGroupEnd(), where(op, in));
  }
  void expect_apart(const char* op, const Tensor& in, const Tensor& out) const {
    const auto* a = static_cast<const std::byte*>(in.data());
    const auto* b = static_cast<const std::byte*>(out.data());
    TROUPE_CHECK(in.nbytes() == 0 || out.nbytes() == 0 || a + in.nbytes() <= b || b + out.nbytes() <= a, where(op, in),
                 ": out ", out.str(), " overlaps in");
  }
  // First row of each member's part: the running sum of `counts` (one per member, none
  // negative, summing to t's rows).
  std::vector<int64_t> row_begins(const char* name, const std::vector<int64_t>& counts, const Tensor& t) const {
    TROUPE_CHECK(int64_t(counts.size()) == size(), where("all_to_all_v", t), ": ", name, " has ", counts.size(),
                 " entries, the group ", size(), " members");
    std::vector<int64_t> begin(counts.size());
    int64_t total = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      TROUPE_CHECK(counts[k] >= 0, where("all_to_all_v", t), ": ", name, "[", k, "] is ", counts[k]);
      begin[k] = total;
      total += counts[k];
    }
    TROUPE_CHECK(total == t.dim(0), where("all_to_all_v", t), ": ", name, " sum to ", total, " rows, the tensor has ",
                 t.dim(0));
    return begin;
  }
  // Before a collective's launch: with launch_together, wait for the other local members.
  void enter(const char* op, const Tensor& t) const {
    if (group_->launch) group_->launch->arrive(where(op, t));
  }

  std::shared_ptr<NcclGroup> group_;
  int rank_;
  ncclComm_t comm_;
  int device_;
};

}  // namespace

std::vector<std::unique_ptr<Collectives>> make_nccl_group(const std::vector<uint8_t>& id_bytes,
                                                          const std::vector<const Context*>& contexts,
                                                          const GroupOptions& options) {
  const ncclUniqueId id = nccl_id_from_bytes(id_bytes);
  auto group = std::make_shared<NcclGroup>();
  group->name = options.name;
  group->size = int(contexts.size());
  group->comms.assign(contexts.size(), nullptr);
  group->devices.assign(contexts.size(), -1);
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (!contexts[i]) continue;
    TROUPE_CHECK(contexts[i]->is_cuda(), "group '", options.name, "': member ", i, " has a CPU context");
    group->devices[i] = contexts[i]->device_index();
    for (size_t j = 0; j < i; ++j)
      TROUPE_CHECK(group->devices[j] != group->devices[i], "group '", options.name, "': members ", j, " and ", i,
                   " are both on cuda:", group->devices[i], " (NCCL needs a GPU per member)");
  }
  try {
    // The ranks of this process join together; across processes ncclGroupEnd returns once
    // every rank has joined.
    TROUPE_NCCL_CHECK(ncclGroupStart(), "group '", options.name, "'");
    for (size_t i = 0; i < contexts.size(); ++i) {
      if (!contexts[i]) continue;
      on_device(group->devices[i], [&] {
        TROUPE_NCCL_CHECK(ncclCommInitRank(&group->comms[i], group->size, id, int(i)), "group '", options.name,
                          "': member ", i, " of ", group->size, " on cuda:", group->devices[i]);
      });
    }
    TROUPE_NCCL_CHECK(ncclGroupEnd(), "group '", options.name, "': creating its communicators");
  } catch (...) {
    group->aborted = true;  // half-made communicators: leave them alone
    throw;
  }
  const int local = int(std::count_if(contexts.begin(), contexts.end(), [](const Context* c) { return c != nullptr; }));
  if (options.launch_together && local > 1) group->launch = std::make_unique<LaunchBarrier>(local, options.timeout);
  std::vector<std::unique_ptr<Collectives>> endpoints(contexts.size());
  for (size_t i = 0; i < contexts.size(); ++i)
    if (contexts[i]) endpoints[i] = std::make_unique<NcclCollectives>(group, int(i));
  return endpoints;
}

}  // namespace troupe::actors::cuda
