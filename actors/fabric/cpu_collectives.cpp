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

  // One step: member q reads part rank_ of our in straight into its out.
  void all_to_all(const Context& ctx, const Tensor& in, const Tensor& out) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "all_to_all", "in", in);
    expect_host(ctx, "all_to_all", "out", out);
    require(in.dtype() == out.dtype() && in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all: in ",
            in.str(), " and out ", out.str(), " must hold ", size(), " equal parts of one dtype");
    expect_apart("all_to_all", in, out);
    const int64_t part = int64_t(in.nbytes()) / size();
    const auto parts = group_->begin_step(rank_, {"all_to_all", seq, part, int(in.dtype())}, in.data(),
                                          int64_t(in.nbytes()), [&](int, int dst) {
                                            return Piece{dst * part, part};
                                          });
    auto* dst = static_cast<std::byte*>(out.data());
    for (int k = 0; k < size(); ++k)
      if (part > 0) std::memcpy(dst + k * part, parts[size_t(k)], size_t(part));
    group_->end_step(rank_);
  }

  // Two steps: the members first swap their counts (what each sends to whom, and where it
  // starts in its in), so that a receiver here knows where its rows lie in the sender's in
  // and every pair checks that both ends agree; then the rows move.
  void all_to_all_v(const Context& ctx, const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts) override {
    const int64_t seq = ++calls_;
    expect_host(ctx, "all_to_all_v", "in", in);
    expect_host(ctx, "all_to_all_v", "out", out);
    const int64_t row = row_bytes("all_to_all_v", in, out);
    const std::vector<int64_t> send_begin = row_begins("send_counts", send_counts, in);
    const std::vector<int64_t> recv_begin = row_begins("recv_counts", recv_counts, out);
    expect_apart("all_to_all_v", in, out);
    const int n_size = size();

    // Step 1. table[k] = {first row sent to member k, rows sent to k, rows expected from k}.
    std::vector<int64_t>& table = counts_table_;
    table.resize(3 * size_t(n_size));
    for (int k = 0; k < n_size; ++k) {
      table[3 * size_t(k)] = send_begin[size_t(k)];
      table[3 * size_t(k) + 1] = send_counts[size_t(k)];
      table[3 * size_t(k) + 2] = recv_counts[size_t(k)];
    }
    const int64_t entry = 3 * int64_t(sizeof(int64_t));
    const StepDesc counts_desc{"all_to_all_v", seq, row, int(in.dtype())};
    const auto entries = group_->begin_step(rank_, counts_desc, table.data(), entry * n_size, [&](int, int dst) {
      return Piece{dst * entry, entry};
    });
    std::vector<int64_t> src_begin(static_cast<size_t>(n_size));  // where our rows start in member k's in
    std::string mismatch;
    for (int k = 0; k < n_size; ++k) {
      int64_t theirs[3];
      std::memcpy(theirs, entries[size_t(k)], sizeof(theirs));
      src_begin[size_t(k)] = theirs[0];
      if (theirs[1] != recv_counts[size_t(k)] || theirs[2] != send_counts[size_t(k)])
        mismatch = str_cat("member ", k, " sends ", theirs[1], " rows here and expects ", theirs[2],
                           ", this member's recv_counts[", k, "] is ", recv_counts[size_t(k)], " and send_counts[", k,
                           "] is ", send_counts[size_t(k)], " (exchange the counts first: exchange_counts)");
    }
    // Only after end_step: our table has reached the members elsewhere, and the members here
    // go on to step 2, where this member's abort finds them.
    group_->end_step(rank_);
    require(mismatch.empty(), "all_to_all_v: ", mismatch);

    // Step 2. The pieces: only their two ends ask for them, and both know them now.
    const auto rows =
        group_->begin_step(rank_, {"all_to_all_v", seq, row, int(in.dtype()) + 256}, in.data(), int64_t(in.nbytes()),
                           [&](int src, int dst) {
                             if (src == rank_)
                               return Piece{send_begin[size_t(dst)] * row, send_counts[size_t(dst)] * row};
                             return Piece{src_begin[size_t(src)] * row, recv_counts[size_t(src)] * row};
                           });
    auto* dst = static_cast<std::byte*>(out.data());
    for (int k = 0; k < n_size; ++k)
      if (recv_counts[size_t(k)] > 0)
        std::memcpy(dst + recv_begin[size_t(k)] * row, rows[size_t(k)], size_t(recv_counts[size_t(k)] * row));
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
  // Others read our in while we write our out: they must not share a byte.
  void expect_apart(const char* op, const Tensor& in, const Tensor& out) {
    const auto* a = static_cast<const std::byte*>(in.data());
    const auto* b = static_cast<const std::byte*>(out.data());
    require(in.nbytes() == 0 || out.nbytes() == 0 || a + in.nbytes() <= b || b + out.nbytes() <= a, op, ": out ",
            out.str(), " overlaps in ", in.str());
  }
  // Bytes per row of all_to_all_v's in and out (the same width and dtype).
  int64_t row_bytes(const char* op, const Tensor& in, const Tensor& out) {
    require(in.ndim() >= 1 && out.ndim() >= 1, op, ": in ", in.str(), " and out ", out.str(),
            " must have rows (a first dimension)");
    const int64_t width = shape_numel(Shape(in.shape().begin() + 1, in.shape().end()));
    const int64_t out_width = shape_numel(Shape(out.shape().begin() + 1, out.shape().end()));
    require(in.dtype() == out.dtype() && width == out_width, op, ": in ", in.str(), " and out ", out.str(),
            " must have rows of one width and dtype");
    return width * int64_t(dtype_size(in.dtype()));
  }
  // First row of each member's part: the running sum of `counts` (one per member, none
  // negative, summing to t's rows).
  std::vector<int64_t> row_begins(const char* name, const std::vector<int64_t>& counts, const Tensor& t) {
    require(int64_t(counts.size()) == size(), "all_to_all_v: ", name, " has ", counts.size(), " entries, the group ",
            size(), " members");
    std::vector<int64_t> begin(counts.size());
    int64_t total = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      require(counts[k] >= 0, "all_to_all_v: ", name, "[", k, "] is ", counts[k]);
      begin[k] = total;
      total += counts[k];
    }
    require(total == t.dim(0), "all_to_all_v: ", name, " sum to ", total, " rows, the tensor ", t.str(), " has ",
            t.dim(0));
    return begin;
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
  // all_to_all_v's counts, as published to the others (kept here: a failed step may leave a
  // transfer of it in flight).
  std::vector<int64_t> counts_table_;
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
