#include "model/context_parallel.hpp"

#include <utility>
#include <vector>

#include "base/check.hpp"
#include "kernels/attention_block.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/stream_fence.hpp"

namespace troupe {

namespace {

// The local sequence's two chunks as contiguous tensors, and their place in the global order.
struct Ring {
  const Context& ctx;
  const ContextParallel& cp;
  int64_t B, h;  // batch, tokens per chunk (local sequence: 2h)
  int64_t H, G, D;
  DType dtype;  // of every activation buffer: qkv's (f32 on CPU, bf16/f16 on CUDA)

  int64_t local_seq() const { return 2 * h; }
  // The context the passes are enqueued on: the pass stream's, else ctx itself.
  const Context& comm() const { return cp.pass_ctx != nullptr ? *cp.pass_ctx : ctx; }
  // Work enqueued on `later` from now on runs after the work enqueued on `earlier` so far.
  static void order(const Context& later, const Context& earlier) {
    if (&later != &earlier) fence_wait(later, fence_record(earlier));
  }
  // The global chunk index of local chunk c (0, 1) of context rank `rank`.
  int64_t global_chunk(int rank, int c) const { return c == 0 ? rank : 2 * int64_t(cp.size) - 1 - rank; }
  // Keys/values of both chunks, chunk-major: [2 * B * h, 2G*D]; chunk c viewed [B, h, 2G*D].
  Tensor kv_chunk(const Tensor& kv, int c) const { return kv.slice(int64_t(c) * B * h * 2 * G * D, {B, h, 2 * G * D}); }

  // Columns [col, col + n) of chunk c's rows of a [B, 2h, w] tensor <-> dst [B, h, n].
  void rows(const Tensor& whole, int c, int64_t col, const Tensor& part, bool to_whole) const {
    const int64_t w = whole.numel() / (B * local_seq()), n = part.numel() / (B * h);
    for (int64_t b = 0; b < B; ++b) {
      const Tensor wr = whole.slice((b * local_seq() + c * h) * w, {h, w});
      const Tensor pr = part.slice(b * h * n, {h, n});
      if (to_whole)
        copy_columns(ctx, pr, 0, wr, col, n);
      else
        copy_columns(ctx, wr, col, pr, 0, n);
    }
  }
  // Chunk c's entries of an lse [B, H, 2h] <-> part [B, H, h].
  void lse_rows(const Tensor& whole, int c, const Tensor& part, bool to_whole) const {
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const Tensor wr = whole.slice(bh * local_seq() + c * h, {h});
      const Tensor pr = part.slice(bh * h, {h});
      copy(ctx, to_whole ? pr : wr, to_whole ? wr : pr);
    }
  }
  // The query heads of both chunks, and their keys/values packed for the ring.
  void split_qkv(const Tensor& qkv, Tensor (&q)[2], const Tensor& kv) const {
    for (int c = 0; c < 2; ++c) {
      q[c] = Tensor::stream_ordered(ctx, dtype, {B, h, H * D});
      rows(qkv, c, 0, q[c], false);
      rows(qkv, c, H * D, kv_chunk(kv, c), false);
    }
  }
  // Sends `t` to the next context rank and receives the previous rank's into `into`, on comm()
  // (callers order it against ctx's work).
  void pass(const Tensor& t, const Tensor& into) const {
    const int next = (cp.rank + 1) % cp.size, prev = (cp.rank + cp.size - 1) % cp.size;
    const int64_t rows = t.numel() / (2 * G * D);
    std::vector<int64_t> send(size_t(cp.size), 0), recv(size_t(cp.size), 0);
    send[size_t(next)] = rows;
    recv[size_t(prev)] = rows;
    cp.comm->all_to_all_v(comm(), t.view({rows, 2 * G * D}), send, into.view({rows, 2 * G * D}), recv);
  }
  // The mask of query chunk qc against key chunk kc, false when the block is skipped.
  static bool block_mask(int64_t qc, int64_t kc, BlockMask& mask) {
    if (kc > qc) return false;
    mask = kc == qc ? BlockMask::causal : BlockMask::full;
    return true;
  }
};

Ring ring_of(const Context& ctx, const ContextParallel& cp, const Tensor& qkv, const AttentionConfig& cfg,
             const char* op) {
  TROUPE_CHECK(cp.size > 1 && cp.comm != nullptr && cp.comm->size() == cp.size && cp.comm->rank() == cp.rank, op,
               ": context rank ", cp.rank, " of ", cp.size, " needs the context group's collectives");
  TROUPE_CHECK(qkv.ndim() == 3 && qkv.dim(1) % 2 == 0, op, ": qkv must be [B, 2h, (H+2G)*D], got ", qkv.str());
  TROUPE_CHECK(cp.pass_ctx == nullptr ||
                   (cp.pass_ctx->kind() == ctx.kind() && cp.pass_ctx->device_index() == ctx.device_index()),
               op, ": the pass context must be on the compute context's device");
  return Ring{ctx, cp, qkv.dim(0), qkv.dim(1) / 2, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, qkv.dtype()};
}

// f32 `acc` rounded into chunk c's columns [col, col + n) of `whole` (R.dtype), through `tmp`
// (R.dtype, acc's shape).
void write_rows(const Ring& R, const Tensor& acc, const Tensor& tmp, const Tensor& whole, int c, int64_t col) {
  convert(R.ctx, acc, tmp);
  R.rows(whole, c, col, tmp, true);
}

}  // namespace

void check_context_split(int64_t seq, int size) {
  TROUPE_CHECK(size >= 1, "--context-parallel-size must be >= 1, got ", size);
  TROUPE_CHECK(seq % (2 * int64_t(size)) == 0, "--seq-length (", seq,
               ") must be divisible by twice the --context-parallel-size (2 x ", size,
               "): each sequence is cut into that many equal chunks");
}

int64_t context_position(const ContextParallel& cp, int64_t local_seq, int64_t t) {
  const int64_t h = local_seq / 2;
  return t < h ? cp.rank * h + t : (2 * int64_t(cp.size) - 1 - cp.rank) * h + (t - h);
}

Tensor context_positions(const Context& ctx, const ContextParallel& cp, int64_t batch, int64_t local_seq) {
  Tensor host = Tensor::host(DType::i32, {batch * local_seq});
  int32_t* p = host.data_as<int32_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < local_seq; ++t) p[b * local_seq + t] = int32_t(context_position(cp, local_seq, t));
  return host.device() == ctx.kind() ? host : to_device(ctx, host, DType::i32);
}

Tensor context_local_tokens(const Tensor& tokens, const ContextParallel& cp) {
  TROUPE_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32 && !tokens.is_cuda(),
               "context_local_tokens: expected host i32 [B, T], got ", tokens.str());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  check_context_split(T, cp.size);
  const int64_t local = T / cp.size;
  Tensor out = Tensor::host(DType::i32, {B, local});
  const int32_t* src = tokens.data_as<int32_t>();
  int32_t* dst = out.data_as<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < local; ++t) dst[b * local + t] = src[b * T + context_position(cp, local, t)];
  return out;
}

// The ring's buffers are stream-ordered (Tensor::stream_ordered): freeing a cudaMalloc'ed one
// would synchronize the device every layer. The comm stream's last use of each is ordered before
// ctx's end of the function, where they are freed.
void context_attention_forward(const Context& ctx, const ContextParallel& cp, const Tensor& qkv,
                               const AttentionConfig& cfg, const Tensor& out, const Tensor& lse) {
  const Ring R = ring_of(ctx, cp, qkv, cfg, "context_attention_forward");
  const int64_t HD = R.H * R.D;
  // Double buffering: step s reads kv[s % 2] while the pass fills the other with step s+1's.
  Tensor q[2], kv[2];
  for (Tensor& t : kv) t = Tensor::stream_ordered(ctx, R.dtype, {2 * R.B * R.h, 2 * R.G * R.D});
  R.split_qkv(qkv, q, kv[0]);
  // Per query chunk the running out (f32) and lse; `part` holds one block's out.
  Tensor acc[2], l[2];
  const Tensor part = Tensor::stream_ordered(ctx, R.dtype, {R.B, R.h, HD});
  const Tensor part_lse = Tensor::stream_ordered(ctx, DType::f32, {R.B, R.H, R.h});
  for (int c = 0; c < 2; ++c) {
    acc[c] = Tensor::stream_ordered(ctx, DType::f32, {R.B, R.h, HD});
    l[c] = Tensor::stream_ordered(ctx, DType::f32, {R.B, R.H, R.h});
  }
  // A query chunk's first block writes its running (out, lse) directly; later blocks merge in.
  // Every chunk meets its causal diagonal, so both are written, and nothing touches the host.
  bool seen[2] = {false, false};
  for (int step = 0; step < cp.size; ++step) {
    const Tensor& here = kv[step % 2];
    if (step + 1 < cp.size) {
      // The next keys/values travel while this step's blocks run. The pass reads `here` and
      // overwrites the buffer the previous step's blocks read: it waits for ctx's work so far.
      Ring::order(R.comm(), ctx);
      R.pass(here, kv[(step + 1) % 2]);
    }
    const int src = (cp.rank - step + cp.size) % cp.size;  // whose keys/values `here` holds
    for (int qi = 0; qi < 2; ++qi) {
      for (int ki = 0; ki < 2; ++ki) {
        BlockMask mask{};
        if (!Ring::block_mask(R.global_chunk(cp.rank, qi), R.global_chunk(src, ki), mask)) continue;
        if (!seen[qi]) {
          attention_block_forward(ctx, q[qi], R.kv_chunk(here, ki), cfg, mask, part, l[qi]);
          convert(ctx, part, acc[qi]);
          seen[qi] = true;
          continue;
        }
        attention_block_forward(ctx, q[qi], R.kv_chunk(here, ki), cfg, mask, part, part_lse);
        attention_block_merge(ctx, acc[qi], l[qi], part, part_lse);
      }
    }
    if (step + 1 < cp.size) Ring::order(ctx, R.comm());  // the next step's blocks read what arrived
  }
  for (int c = 0; c < 2; ++c) {
    write_rows(R, acc[c], part, out, c, 0);
    R.lse_rows(lse, c, l[c], true);
  }
}

void context_attention_backward(const Context& ctx, const ContextParallel& cp, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, const Tensor& dqkv) {
  const Ring R = ring_of(ctx, cp, qkv, cfg, "context_attention_backward");
  const int64_t HD = R.H * R.D;
  const Shape kv_shape{2 * R.B * R.h, 2 * R.G * R.D};
  // Double buffers: keys/values as in the forward, and `mine`, this rank's share (f32) of the
  // gradient of the keys/values at hand (one is summed while the other is on its way). `arrived`
  // is the accumulator of their owner's gradient, summed by the ranks that held them before: it
  // travels one pass behind the keys/values, and one pass more at the end, home. One buffer
  // does: it is read before the next pass into it is posted.
  Tensor q[2], kv[2], mine[2];
  for (int i = 0; i < 2; ++i) {
    kv[i] = Tensor::stream_ordered(ctx, R.dtype, kv_shape);
    mine[i] = Tensor::stream_ordered(ctx, DType::f32, kv_shape);
  }
  const Tensor arrived = Tensor::stream_ordered(ctx, DType::f32, kv_shape);
  R.split_qkv(qkv, q, kv[0]);
  Tensor dy[2], o[2], l[2], dq[2];
  for (int c = 0; c < 2; ++c) {
    dy[c] = Tensor::stream_ordered(ctx, R.dtype, {R.B, R.h, HD});
    o[c] = Tensor::stream_ordered(ctx, R.dtype, {R.B, R.h, HD});
    l[c] = Tensor::stream_ordered(ctx, DType::f32, {R.B, R.H, R.h});
    dq[c] = Tensor::stream_ordered(ctx, DType::f32, {R.B, R.h, HD});
    fill_zero(ctx, dq[c]);
    R.rows(dout, c, 0, dy[c], false);
    R.rows(out, c, 0, o[c], false);
    R.lse_rows(lse, c, l[c], false);
  }
  for (int step = 0; step < cp.size; ++step) {
    const Tensor &here = kv[step % 2], &share = mine[step % 2];
    if (step + 1 < cp.size) {  // as in the forward: the next keys/values travel meanwhile
      Ring::order(R.comm(), ctx);
      R.pass(here, kv[(step + 1) % 2]);
    }
    // `share` was sent two steps ago; ctx waited for that pass at the end of the last step.
    fill_zero(ctx, share);
    const int src = (cp.rank - step + cp.size) % cp.size;
    for (int qi = 0; qi < 2; ++qi) {
      for (int ki = 0; ki < 2; ++ki) {
        BlockMask mask{};
        if (!Ring::block_mask(R.global_chunk(cp.rank, qi), R.global_chunk(src, ki), mask)) continue;
        attention_block_backward(ctx, dy[qi], q[qi], R.kv_chunk(here, ki), o[qi], l[qi], cfg, mask, dq[qi],
                                 R.kv_chunk(share, ki));
      }
    }
    // Everything posted so far has arrived: the accumulator passed last step (read now) and the
    // keys/values of the next step. The previous holders' sum plus this rank's share goes on.
    Ring::order(ctx, R.comm());
    if (step > 0) add(ctx, share, arrived, share);
    Ring::order(R.comm(), ctx);
    R.pass(share, arrived);
  }
  Ring::order(ctx, R.comm());  // the last pass brought this rank's own accumulator home
  // Rounded through buffers whose last readers ran before on ctx: dy[c] and kv[0].
  for (int c = 0; c < 2; ++c) {
    write_rows(R, dq[c], dy[c], dqkv, c, 0);
    write_rows(R, R.kv_chunk(arrived, c), R.kv_chunk(kv[0], c), dqkv, c, HD);
  }
}

}  // namespace troupe
