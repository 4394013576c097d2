// Embedding reference: f32 tables, token ids checked before any work.
#include <algorithm>

#include "base/check.hpp"
#include "kernels/embedding.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {

// Column tile of the dwte scatter-add: each thread owns a tile of every row, so repeated
// tokens need no atomics and add up in a fixed order.
constexpr int64_t kColumnTile = 64;

// Throws on the first id that cannot be a token, naming its position: outside [0, vocab) for
// the whole table; negative for a shard (ids of other shards are fine, and the global
// vocabulary is not known here).
void check_token_ids(const char* op, const Tensor& tokens, int64_t vocab, const VocabShard& shard) {
  const int32_t* ids = tokens.data_as<int32_t>();
  const int64_t seq_len = tokens.dim(1);
  for (int64_t n = 0; n < tokens.numel(); ++n) {
    if (shard.sharded)
      TROUPE_CHECK(ids[n] >= 0, op, ": token id ", ids[n], " at [", n / seq_len, ", ", n % seq_len, "] is negative");
    else
      TROUPE_CHECK(ids[n] >= 0 && ids[n] < vocab, op, ": token id ", ids[n], " at [", n / seq_len, ", ", n % seq_len,
                   "] is outside the vocabulary [0, ", vocab, ")");
  }
}

// The row of a [rows, C] token table (or its gradient) that holds `id`, or -1 when the id
// belongs to another vocabulary shard.
int64_t local_row(int32_t id, int64_t rows, const VocabShard& shard) {
  const int64_t r = int64_t(id) - (shard.sharded ? shard.start : 0);
  return r >= 0 && r < rows ? r : -1;
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out,
                       int64_t pos_offset, const VocabShard& shard) {
  check_token_ids("embedding_forward", tokens, wte.dim(0), shard);
  const int32_t* ids = tokens.data_as<int32_t>();
  const int64_t rows = tokens.numel(), seq_len = tokens.dim(1), vocab_rows = wte.dim(0), c = wte.dim(1);
  const float* token_table = wte.data_as<float>();
  const float* pos_table = wpe.defined() ? wpe.data_as<float>() : nullptr;
  float* y = out.data_as<float>();
#pragma omp parallel for if (worth_parallel(rows * c)) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t r = local_row(ids[n], vocab_rows, shard);
    const float* pos = pos_table ? pos_table + (pos_offset + n % seq_len) * c : nullptr;
    float* yr = y + n * c;
    if (r < 0) {  // another shard's token: a zero token row
      if (pos)
        std::copy(pos, pos + c, yr);
      else
        std::fill(yr, yr + c, 0.0f);
      continue;
    }
    const float* tok = token_table + r * c;
    if (pos) {
      for (int64_t j = 0; j < c; ++j) yr[j] = tok[j] + pos[j];
    } else {
      std::copy(tok, tok + c, yr);
    }
  }
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe,
                        int64_t pos_offset, const VocabShard& shard) {
  check_token_ids("embedding_backward", tokens, dwte.dim(0), shard);
  const int32_t* ids = tokens.data_as<int32_t>();
  const int64_t batch = tokens.dim(0), seq_len = tokens.dim(1), rows = tokens.numel(), c = dout.dim(2);
  const int64_t vocab_rows = dwte.dim(0);
  const float* g = dout.data_as<float>();

  float* dtok = dwte.data_as<float>();
  const int64_t tiles = (c + kColumnTile - 1) / kColumnTile;
#pragma omp parallel for if (worth_parallel(rows * c)) schedule(static)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = tile * kColumnTile, j1 = std::min(c, j0 + kColumnTile);
    for (int64_t n = 0; n < rows; ++n) {
      const int64_t r = local_row(ids[n], vocab_rows, shard);
      if (r < 0) continue;  // another shard's token
      float* dst = dtok + r * c;
      for (int64_t j = j0; j < j1; ++j) dst[j] += g[n * c + j];
    }
  }

  if (!dwpe.defined()) return;
  float* dpos = dwpe.data_as<float>();
#pragma omp parallel for if (worth_parallel(seq_len * batch * c)) schedule(static)
  for (int64_t t = 0; t < seq_len; ++t) {
    float* dst = dpos + (pos_offset + t) * c;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < c; ++j) dst[j] += g[(b * seq_len + t) * c + j];
  }
}

}  // namespace troupe::cpu
