// A model chunk: an optional embedding, a run of transformer layers, an optional final
// norm + output layer + loss. It owns its parameter buffer (compute dtype) and gradient
// buffer (f32), and runs forward and backward for one microbatch at a time on its context.
// This is the unit a pipeline stage executes; a single-device model is one chunk.
//
//   GptChunk chunk(ctx, config, ChunkSpec::whole_model(), DType::bf16);
//   chunk.init_weights(1234);
//   ActivationsPtr a = chunk.forward(tokens, targets, {}, {.training = true, .loss_grad_scale = 1.0f / n});
//   chunk.backward(*a, {}, {});   // gradients accumulate into chunk.grads()
//   chunk.release(std::move(a));  // activation memory goes back to the pool
#pragma once

#include <memory>
#include <vector>

#include "kernels/context.hpp"
#include "kernels/op_profiler.hpp"
#include "kernels/tensor.hpp"
#include "model/activations.hpp"
#include "model/config.hpp"
#include "model/param_layout.hpp"

namespace troupe {

struct ForwardOptions {
  bool training = true;         // dropout on; the loss gradient is produced (post-process)
  float loss_grad_scale = 1.0f;  // d(objective)/d(per-token loss), e.g. loss_scale / tokens in the batch
  uint64_t dropout_seed = 0;    // distinct per microbatch and step
};

using ActivationsPtr = std::unique_ptr<ChunkActivations>;

class GptChunk {
 public:
  // compute: f32 on a CPU context; bf16 or f16 on a CUDA context.
  GptChunk(const Context& ctx, const GptConfig& config, const ChunkSpec& spec, DType compute);
  ~GptChunk();
  GptChunk(const GptChunk&) = delete;
  GptChunk& operator=(const GptChunk&) = delete;

  const GptConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  const Context& context() const { return ctx_; }
  DType compute_dtype() const { return compute_; }
  const Tensor& params() const { return params_; }  // [P] compute dtype
  const Tensor& grads() const { return grads_; }    // [P] f32
  void zero_grads();

  // Megatron initialization (init_params) with the given seed, uploaded to the device.
  void init_weights(uint64_t seed);
  // Loads a host f32 buffer of layout().size() elements (converted to the compute dtype).
  void load_weights(const Tensor& host_f32);

  // input: i32 tokens [B, T] (pre-process chunk) or hidden [B, T, C] in the compute dtype.
  // targets: i32 [B, T] (post-process chunk; -1 = ignored), else undefined.
  // output: hidden [B, T, C] the chunk writes (not post-process), else undefined.
  // Host tensors are copied to the device. Returns the saved activations; for a
  // post-process chunk they hold `losses` (and `logits` when !options.training).
  ActivationsPtr forward(const Tensor& input, const Tensor& targets, const Tensor& output,
                         const ForwardOptions& options);
  // doutput: gradient of the chunk's output [B, T, C] (not post-process), else undefined.
  // dinput: receives the gradient of the hidden input (not pre-process), else undefined.
  // Parameter gradients accumulate into grads().
  void backward(ChunkActivations& acts, const Tensor& doutput, const Tensor& dinput);
  // Returns a set of activations to the pool for reuse.
  void release(ActivationsPtr acts);
  // Times every op into `profiler` (null: off). The profiler must outlive its use.
  void set_profiler(OpProfiler* profiler) { profiler_ = profiler; }

 private:
  struct Scratch;  // per-shape temporaries shared by all microbatches (one stream)
  ActivationsPtr acquire(int64_t batch, int64_t seq);
  Scratch& scratch(int64_t batch, int64_t seq);
  void layer_forward(int l, ChunkActivations& a, const ForwardOptions& o);
  void layer_backward(int l, ChunkActivations& a);
  void norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd);
  void norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& db);
  Tensor device_tokens(const Tensor& t);
  OpProfiler::Scope timed(const char* name) { return OpProfiler::Scope(profiler_, name); }

  const Context& ctx_;
  ParamLayout layout_;
  DType compute_;
  Tensor params_, grads_;
  // Views into params_/grads_, built once (name lookups are not free).
  std::vector<LayerTensors> layer_params_, layer_grads_;
  OuterTensors outer_params_, outer_grads_;
  std::vector<ActivationsPtr> pool_;
  std::unique_ptr<Scratch> scratch_;
  OpProfiler* profiler_ = nullptr;
};

}  // namespace troupe
