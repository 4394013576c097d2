// The FP8 state and GEMMs of a chunk's linear layers (Transformer Engine's fp8 Linear): per
// linear the scaling meta of its input x, its weight w (the recipe's forward format) and its
// output gradient dy (the backward format), and the layer's three GEMMs in FP8:
//
//   forward:  y  = q(x) q(w)^T + b                      fp8_gemm(qx, qw)
//   dgrad:    dx = q(dy) q(w)                           fp8_gemm(qdy, qw^T)
//   wgrad:    dw += q(dy)^T q(x)                        fp8_gemm(qdy^T, qx^T), f32 (or, with
//             --no-fp8-wgrad, linear_backward's GEMM on dy and x unquantized)
//   db += column sums of dy (unquantized, as TE)
//
// Scales (kernels/fp8.hpp): delayed scaling casts with the scale of the steps before and
// accumulates each tensor's amax into its history's newest row; update_scales() (once per
// optimizer step, after the last backward) reduces those amaxes (max) over the given groups and
// computes the next scales. Tensorwise scaling takes each cast's scale from that tensor's amax,
// reduced over the tensor-parallel group (and the context-parallel one, whose ranks hold other
// tokens) first, so every rank of a sharded tensor scales as one device would.
//
//   Fp8Linears fp8(ctx, recipe, 4 * layers, {tp.comm});
//   fp8.forward(0, ln1, qkv_w, qkv_b, qkv);
//   fp8.backward(0, dqkv, ln1, qkv_w, dln1, dqkv_w, dqkv_b);
//   fp8.update_scales({tp.comm, dp.comm});
//
// Fused casts (Fp8Recipe::fuse_casts, on unless a test turns it off): delayed scaling folds the
// amax it records into the cast of the same tensor (one pass over x, w and dy, not two), and the
// op that produces a linear's input (ln1 for qkv, ln2 for fc1, the GELU for fc2) writes its cast
// in its own pass (input_cast: delayed, the e4m3 bytes, as the scale is known before x exists;
// tensorwise, only x's amax, the cast after).
//
//   const Fp8SideOutput cast = fp8.input_cast(0, ln1.shape(), true);
//   layernorm_forward(ctx, x, ln_w, ln_b, eps, ln1, mean, rstd, cast);   // kernels/norm.hpp
//   fp8.forward(0, ln1, qkv_w, qkv_b, qkv, true, cast);
//
// Zero-bubble schedules split backward in two: backward_input (the B op: dgrad) casts dy, records
// its amax and writes the scales of x and dy into `wgrad_scales`; backward_weight (the W op, later,
// after other microbatches' casts moved the meta) casts x and dy again with those scales, so the
// weight gradient equals backward's bit for bit and each amax is counted once.
#pragma once

#include <vector>

#include "kernels/collectives.hpp"
#include "kernels/fp8.hpp"
#include "kernels/fp8_gemm.hpp"
#include "model/fp8/fp8_recipe.hpp"

namespace troupe {

class Fp8Linears {
 public:
  // `count` linear layers; cast_groups: the groups whose ranks hold parts of one tensor (tensor-
  // and context-parallel; null entries and single-member groups are skipped).
  Fp8Linears(const Context& ctx, const Fp8Recipe& recipe, int count, std::vector<Collectives*> cast_groups);

  const Fp8Recipe& recipe() const { return recipe_; }
  // x [M, K]; w [N, K]; b [N] or undefined; y [M, N] (the compute dtype). record: delayed
  // scaling records x's and w's amaxes (training forwards; evaluation leaves the scales alone).
  // x_cast: what input_cast(linear, x.shape(), record) returned, written by the op that produced
  // x (delayed: x's cast; tensorwise: x's amax); empty: this forward casts x.
  void forward(int linear, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record = true,
               const Fp8SideOutput& x_cast = {});
  // What the op producing linear's input x (of x_shape: a norm, the GELU) writes beside x in its
  // own pass (kernels/fp8.hpp), for forward's x_cast: delayed scaling, x's e4m3 bytes with x's
  // scale, and x's amax recorded when `record`; tensorwise, x's amax alone (zeroed here). The
  // bytes are scratch that the next input_cast or forward reuses: ask for them after the previous
  // linear's forward was enqueued. Empty (no side output) with fuse_casts off.
  Fp8SideOutput input_cast(int linear, const Shape& x_shape, bool record);
  // dy [M, N]; dx [M, K] (overwritten), dw f32 [N, K] and db f32 [N] (accumulated): each may
  // be undefined.
  void backward(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                const Tensor& db);
  // backward, split: dx (undefined: nothing) and, for backward_weight, wgrad_scales f32
  // [kWgradScales, kFp8ScaleRow] (rows: x's scale, scale_inv, dy's scale, scale_inv; any contents
  // before backward_input).
  static constexpr int64_t kWgradScales = 4;
  void backward_input(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                      const Tensor& wgrad_scales);
  void backward_weight(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                       const Tensor& db, const Tensor& wgrad_scales);
  // Delayed scaling: the step's amaxes reduced (max) over each group (null entries skipped),
  // then every tensor's next scale and the histories rolled. Nothing under tensorwise.
  void update_scales(const std::vector<Collectives*>& groups);

  // The scaling state, f32 on the device (tests, checkpoints): forward tensors
  // are columns 2i (x of linear i) and 2i + 1 (w), backward ones column i (dy).
  struct Meta {
    Tensor history;    // [L, T]; row 0 this step's amaxes
    Tensor scale;      // [T]
    Tensor scale_inv;  // [T, kFp8ScaleRow]: tensor t's at row t, aligned for the GEMMs
  };
  const Meta& forward_meta() const { return fwd_; }
  const Meta& backward_meta() const { return bwd_; }
  // A checkpoint's state (copied in): history and scale of these shapes, scale_inv [T] (its
  // column 0).
  void load_meta(const Meta& forward, const Meta& backward);

 private:
  struct Scales {
    Tensor scale, scale_inv;  // f32 [1] views into a Meta
    Tensor amax;              // delayed, recording: where the cast folds x's amax (else undefined)
  };
  // Meta tensor t's scales for casting x: tensorwise, computed from x's amax; delayed, the
  // step's (x's amax to be recorded when `record`: by the cast, or here with fuse_casts off).
  Scales scales_for(Meta& meta, int t, Fp8Format f, const Tensor& x, bool record);
  // Tensorwise: meta tensor t's scales from the amax in its history slot (x's, this rank's part),
  // reduced over the cast groups first.
  Scales current_scales(Meta& meta, int t, Fp8Format f);
  // q = the cast of x with meta tensor t's scale (scales_for).
  Fp8Operand quantize(Meta& meta, int t, Fp8Format f, const Tensor& x, Tensor& q, bool record = true);
  // The cast of x [R, C] transposed, [C, R] in qt (and x's cast itself in q when defined), with
  // meta tensor t's scale: the K-major operands of the backward's GEMMs.
  Fp8Operand quantize_transposed(Meta& meta, int t, Fp8Format f, const Tensor& x, const Tensor& q, Tensor& qt,
                                 bool record);
  // The cast of x transposed with given scales (f32 [1] each): the W op's operands.
  Fp8Operand cast_transposed(Fp8Format f, const Tensor& x, const Tensor& scale, const Tensor& scale_inv, Tensor& qt);
  // db, and --no-fp8-wgrad's dw, from dy unquantized.
  void high_precision_gradients(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw, const Tensor& db);
  // dx = dy w through FP8, dy cast as qdy.
  void input_gradient(int linear, const Fp8Operand& qdy, const Tensor& w, const Tensor& dx);
  // A byte buffer of `shape`, reusing `buf` when large enough (ops run in stream order).
  Tensor bytes(Tensor& buf, const Shape& shape);

  const Context& ctx_;
  Fp8Recipe recipe_;
  int count_;
  std::vector<Collectives*> cast_groups_;
  Meta fwd_, bwd_;
  Tensor qx_, qw_, qdy_, qt_a_, qt_b_;  // scratch: quantized operands and transposes
};

}  // namespace troupe
