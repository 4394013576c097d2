#include "model/moe/expert_parallel.hpp"

#include <numeric>

#include "base/check.hpp"
#include "kernels/row_blocks.hpp"
#include "model/moe/scratch_tensor.hpp"

namespace troupe {

namespace {

// Copies row blocks between the received layout (by source member q, then local expert j) and
// the local layout (by j, then q), in one op. to_local: received -> local; else local -> received.
void reorder_blocks(const Context& ctx, const MoeExpertExchange& ex, const Tensor& received, const Tensor& local,
                    bool to_local) {
  const int members = ex.members, experts = ex.local_experts;
  std::vector<int64_t> local_at(ex.local_offsets.begin(), ex.local_offsets.end() - 1);  // next row of each expert
  std::vector<RowBlock> blocks;
  int64_t from = 0;
  for (int q = 0; q < members; ++q)
    for (int j = 0; j < experts; ++j) {
      const int64_t n = ex.recv_expert_rows[size_t(q) * size_t(experts) + size_t(j)];
      if (n > 0)
        blocks.push_back(to_local ? RowBlock{from, local_at[size_t(j)], n} : RowBlock{local_at[size_t(j)], from, n});
      from += n;
      local_at[size_t(j)] += n;
    }
  if (to_local)
    copy_row_blocks(ctx, received, local, blocks);
  else
    copy_row_blocks(ctx, local, received, blocks);
}

void expect_rows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t width) {
  TROUPE_CHECK((t.shape() == Shape{rows, width}), op, ": ", name, " ", t.str(), " should be [", rows, ", ", width, "]");
}

}  // namespace

int64_t MoeExpertExchange::sent_rows() const { return std::accumulate(send_rows.begin(), send_rows.end(), int64_t(0)); }

MoeExpertExchange moe_expert_exchange(const Context& ctx, Collectives& group,
                                      const std::vector<int64_t>& expert_offsets) {
  const int members = group.size();
  const int64_t experts = int64_t(expert_offsets.size()) - 1;
  TROUPE_CHECK(experts > 0 && experts % members == 0, "moe_expert_exchange: ", experts,
               " experts do not split evenly over an expert group of ", members);
  MoeExpertExchange ex;
  ex.members = members;
  ex.rank = group.rank();
  ex.local_experts = int(experts / members);
  const int el = ex.local_experts;
  // Every member's rows per expert, sent as member q's part: the counts of q's experts.
  Tensor send = Tensor::host(DType::i64, {experts}), recv = Tensor::host(DType::i64, {experts});
  for (int64_t e = 0; e < experts; ++e)
    send.data_as<int64_t>()[e] = expert_offsets[size_t(e) + 1] - expert_offsets[size_t(e)];
  host_all_to_all(ctx, group, send, recv);  // on a GPU a host synchronization
  const int64_t* got = recv.data_as<int64_t>();
  ex.recv_expert_rows.assign(got, got + experts);
  ex.send_rows.assign(size_t(members), 0);
  ex.recv_rows.assign(size_t(members), 0);
  ex.local_offsets.assign(size_t(el) + 1, 0);
  for (int q = 0; q < members; ++q)
    for (int j = 0; j < el; ++j) {
      const size_t i = size_t(q) * size_t(el) + size_t(j);
      ex.send_rows[size_t(q)] += send.data_as<int64_t>()[i];
      ex.recv_rows[size_t(q)] += ex.recv_expert_rows[i];
      ex.local_offsets[size_t(j) + 1] += ex.recv_expert_rows[i];
    }
  for (int j = 0; j < el; ++j) ex.local_offsets[size_t(j) + 1] += ex.local_offsets[size_t(j)];
  return ex;
}

void moe_expert_dispatch(const Context& ctx, Collectives& group, const MoeExpertExchange& ex, const Tensor& rows,
                         const Tensor& local) {
  TROUPE_CHECK(rows.shape().size() == 2, "moe_expert_dispatch: rows ", rows.str(), " should be [R, C]");
  const int64_t width = rows.dim(1);
  expect_rows("moe_expert_dispatch", "rows", rows, ex.sent_rows(), width);
  expect_rows("moe_expert_dispatch", "local", local, ex.local_rows(), width);
  const ScratchTensor received(ctx, local.dtype(), local.shape());  // no device synchronization when freed
  group.all_to_all_v(ctx, rows, ex.send_rows, received, ex.recv_rows);
  reorder_blocks(ctx, ex, received, local, /*to_local=*/true);
}

void moe_expert_combine(const Context& ctx, Collectives& group, const MoeExpertExchange& ex, const Tensor& local,
                        const Tensor& rows) {
  TROUPE_CHECK(rows.shape().size() == 2, "moe_expert_combine: rows ", rows.str(), " should be [R, C]");
  const int64_t width = rows.dim(1);
  expect_rows("moe_expert_combine", "local", local, ex.local_rows(), width);
  expect_rows("moe_expert_combine", "rows", rows, ex.sent_rows(), width);
  const ScratchTensor received(ctx, local.dtype(), local.shape());  // no device synchronization when freed
  reorder_blocks(ctx, ex, received, local, /*to_local=*/false);
  group.all_to_all_v(ctx, received, ex.recv_rows, rows, ex.send_rows);
}

}  // namespace troupe
