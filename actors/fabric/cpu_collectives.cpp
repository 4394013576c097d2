#include "actors/fabric/cpu_collectives.hpp"

#include <cstring>

#include "actors/fabric/collective_groups.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

// acc <- acc (op) src, elementwise. max lets NaN through (a NaN anywhere is a NaN everywhere).
template <typename T>
void accumulate(T* acc, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::sum) {
    for (int64_t e = 0; e < n; ++e) acc[e] += src[e];
  } else {
    for (int64_t e = 0; e < n; ++e)
      if (src[e] > acc[e] || src[e] != src[e]) acc[e] = src[e];
  }
}

// out[e] <- src[0][e] (op) src[1][e] (op) ... in member order: the same bits on every member.
template <typename T>
void reduce_members(std::byte* out, const std::vector<const std::byte*>& src, int64_t n, ReduceOp op) {
  if (n == 0) return;
  std::memcpy(out, src[0], size_t(n) * sizeof(T));
  for (size_t k = 1; k < src.size(); ++k)
    accumulate(reinterpret_cast<T*>(out), reinterpret_cast<const T*>(src[k]), n, op);
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

// Member j's part of n elements split over `size`: [begin(j), begin(j + 1)).
int64_t part_begin(int64_t n, int size, int j) { return n * j / size; }

class CpuCollectives final : public Collectives {
 public:
  CpuCollectives(std::shared_ptr<HostGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  // Member j reduces part j of every member's t (reduce-scatter), then every member copies
  // every part (all-gather): each element is reduced once, in member order, so all members
  // hold the same bits, and each member does 1/size of the arithmetic.
  void all_reduce(const Context& ctx, const Tensor& t, ReduceOp op) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "all_reduce", "t", t);
    expect_reducible("all_reduce", t, op);
    const int n_size = size();
    const int64_t n = t.numel(), es = int64_t(dtype_size(t.dtype()));
    const int detail = int(t.dtype()) * 16 + int(op);
    auto* data = static_cast<std::byte*>(t.data());

    const auto parts = group_->begin_step(rank_, {"all_reduce", seq, n * es, detail}, data, n * es, [&](int, int dst) {
      return Piece{part_begin(n, n_size, dst) * es, (part_begin(n, n_size, dst + 1) - part_begin(n, n_size, dst)) * es};
    });
    const int64_t mine = part_begin(n, n_size, rank_ + 1) - part_begin(n, n_size, rank_);
    scratch_.resize(size_t(mine * es));
    reduce(t.dtype(), scratch_.data(), parts, mine, op);
    group_->end_step(rank_);

    const auto reduced = group_->begin_step(
        rank_, {"all_reduce", seq, n * es, detail + 256}, scratch_.data(), mine * es, [&](int src, int) {
          return Piece{0, (part_begin(n, n_size, src + 1) - part_begin(n, n_size, src)) * es};
        });
    for (int k = 0; k < n_size; ++k) {
      const int64_t begin = part_begin(n, n_size, k), count = part_begin(n, n_size, k + 1) - begin;
      if (count > 0) std::memcpy(data + begin * es, reduced[size_t(k)], size_t(count * es));
    }
    group_->end_step(rank_);
  }

  void reduce_scatter(const Context& ctx, const Tensor& in, const Tensor& out) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "reduce_scatter", "in", in);
    expect_host(ctx, "reduce_scatter", "out", out);
    expect_reducible("reduce_scatter", in, ReduceOp::sum);
    const int64_t n = out.numel(), es = int64_t(dtype_size(in.dtype()));
    require(in.dtype() == out.dtype() && in.numel() == n * size(), "reduce_scatter: in ", in.str(), " must hold ",
            size(), " x out ", out.str());
    const auto parts = group_->begin_step(rank_, {"reduce_scatter", seq, in.numel() * es, int(in.dtype())}, in.data(),
                                          in.numel() * es, [&](int, int dst) {
                                            return Piece{dst * n * es, n * es};
                                          });
    // Into scratch first: out may alias our part of `in`, which reduce() is still reading.
    scratch_.resize(size_t(n * es));
    reduce(in.dtype(), scratch_.data(), parts, n, ReduceOp::sum);
    group_->end_step(rank_);
    if (n > 0) std::memcpy(out.data(), scratch_.data(), size_t(n * es));
  }

  void all_gather(const Context& ctx, const Tensor& in, const Tensor& out) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "all_gather", "in", in);
    expect_host(ctx, "all_gather", "out", out);
    const int64_t bytes = int64_t(in.nbytes());
    require(in.dtype() == out.dtype() && out.numel() == in.numel() * size(), "all_gather: out ", out.str(),
            " must hold ", size(), " x in ", in.str());
    const auto parts =
        group_->begin_step(rank_, {"all_gather", seq, bytes, int(in.dtype())}, in.data(), bytes, [&](int, int) {
          return Piece{0, bytes};
        });
    // Our own part may be `in` itself, which the others are reading: then there is nothing to copy.
    auto* dst = static_cast<std::byte*>(out.data());
    for (int k = 0; k < size(); ++k)
      if (bytes > 0 && dst + k * bytes != parts[size_t(k)])
        std::memcpy(dst + k * bytes, parts[size_t(k)], size_t(bytes));
    group_->end_step(rank_);
  }

  void broadcast(const Context& ctx, const Tensor& t, int root) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "broadcast", "t", t);
    require(root >= 0 && root < size(), "broadcast: root ", root, " of ", size(), " members");
    const int64_t bytes = int64_t(t.nbytes());
    const auto parts = group_->begin_step(rank_, {"broadcast", seq, bytes, int(t.dtype()) * 65536 + root}, t.data(),
                                          bytes, [&](int src, int) {
                                            return Piece{0, src == root ? bytes : 0};
                                          });
    if (rank_ != root && bytes > 0) std::memcpy(t.data(), parts[size_t(root)], size_t(bytes));
    group_->end_step(rank_);
  }

  void abort() override { group_->abort(str_cat("member ", rank_, " aborted the group")); }

 private:
  // A caller's mistake fails this member at once and, through the group, the others (instead
  // of leaving them to time out).
  template <typename... Args>
  void require(bool ok, const Args&... args) {
    if (ok) return;
    const std::string what = str_cat("group '", group_->name(), "' member ", rank_, ": ", args...);
    group_->abort(what);
    throw Error(what);
  }
  void expect_host(const Context& ctx, const char* op, const char* arg, const Tensor& t) {
    require(!ctx.is_cuda(), op, ": a CUDA context on a CPU group");
    require(t.defined() && !t.is_cuda(), op, ": ", arg, " ", t.defined() ? t.str() : "(undefined)",
            " is not a host tensor");
  }
  void expect_reducible(const char* op, const Tensor& t, ReduceOp r) {
    const DType d = t.dtype();
    require(d == DType::f32 || d == DType::i32 || d == DType::i64, op, " (", reduce_op_name(r), "): ", t.str(),
            ": CPU groups reduce f32, i32 and i64");
  }
  static void reduce(DType d, std::byte* out, const std::vector<const std::byte*>& src, int64_t n, ReduceOp op) {
    switch (d) {
      case DType::f32:
        return reduce_members<float>(out, src, n, op);
      case DType::i32:
        return reduce_members<int32_t>(out, src, n, op);
      case DType::i64:
        return reduce_members<int64_t>(out, src, n, op);
      default:
        TROUPE_FAIL("reduce: dtype ", dtype_name(d));
    }
  }

  std::shared_ptr<HostGroup> group_;
  int rank_;
  int64_t calls_ = 0;
  std::vector<std::byte> scratch_;
};

}  // namespace

std::unique_ptr<Collectives> make_cpu_endpoint(std::shared_ptr<HostGroup> group, int rank) {
  return std::make_unique<CpuCollectives>(std::move(group), rank);
}

std::vector<std::unique_ptr<Collectives>> make_cpu_group(int size, const GroupOptions& options) {
  TROUPE_CHECK(size >= 1, "make_cpu_group: size ", size);
  auto group = std::make_shared<HostGroup>(std::vector<int>(size_t(size), 0), 0, options.name, options.timeout);
  std::vector<std::unique_ptr<Collectives>> members;
  for (int i = 0; i < size; ++i) members.push_back(make_cpu_endpoint(group, i));
  return members;
}

}  // namespace troupe::actors
