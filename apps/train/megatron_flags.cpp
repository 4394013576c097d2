#include "apps/train/megatron_flags.hpp"

#include <sstream>

#include "base/check.hpp"

namespace troupe::apps {

namespace {

constexpr auto kNoEffect = MegatronFlagStatus::no_effect;
constexpr auto kOnly = MegatronFlagStatus::only_values;
constexpr auto kRefused = MegatronFlagStatus::refused;

// Notes shared by several flags.
constexpr const char* kAttention =
    "CUDA attention runs cuDNN's fused kernels (or Troupe's own): set TROUPE_ATTENTION_BACKEND=cudnn|flash|"
    "cudnn-deterministic (docs/benchmarks.md)";
constexpr const char* kFusion = "a kernel-fusion switch; Troupe's kernels are its own";
constexpr const char* kTensorBoard = "--tensorboard-dir writes Troupe's scalars (docs/monitoring.md)";
constexpr const char* kWandb =
    "Weights & Biases is not reachable from here: use --tensorboard-dir or `troupe monitor` (docs/monitoring.md)";
constexpr const char* kFp8Layers = "keeping the first and last layers out of FP8 is not implemented";
constexpr const char* kScaler =
    "--fp16's dynamic loss scaler runs with Megatron's defaults; other settings are not implemented yet";
constexpr const char* kDistCkpt = "only for Megatron's torch_dist format; Troupe's checkpoints are its own";
constexpr const char* kStragglerSwitch =
    "the straggler report has no run-time switch: --straggler-factor 0 turns it off (docs/train.md)";

}  // namespace

// Longer than our functions usually are: the table, one flag a line.
// NOLINTNEXTLINE(readability-function-size)
const std::vector<MegatronFlag>& megatron_flags() {
  static const std::vector<MegatronFlag> table = {
      // Implementation choices and kernel fusions.
      {"--use-mcore-models", 0, kNoEffect, "", "Troupe has one GPT implementation"},
      {"--transformer-impl", 1, kNoEffect, "", "Troupe has one GPT implementation (no Transformer Engine)"},
      {"--attention-backend", 1, kNoEffect, "", kAttention},
      {"--use-flash-attn", 0, kNoEffect, "", kAttention},
      {"--no-masked-softmax-fusion", 0, kNoEffect, "", kFusion},
      {"--no-bias-gelu-fusion", 0, kNoEffect, "", kFusion},
      {"--no-bias-swiglu-fusion", 0, kNoEffect, "", kFusion},
      {"--no-bias-dropout-fusion", 0, kNoEffect, "", kFusion},
      {"--no-rope-fusion", 0, kNoEffect, "", kFusion},
      {"--no-gradient-accumulation-fusion", 0, kNoEffect, "", kFusion},
      {"--use-fused-rmsnorm", 0, kNoEffect, "", kFusion},
      {"--no-persist-layer-norm", 0, kNoEffect, "", kFusion},
      {"--cross-entropy-loss-fusion", 0, kNoEffect, "", kFusion},
      {"--cross-entropy-fusion-impl", 1, kNoEffect, "", kFusion},
      {"--attention-softmax-in-fp32", 0, kNoEffect, "", "attention softmax is computed in fp32 here"},
      {"--accumulate-allreduce-grads-in-fp32", 0, kNoEffect, "",
       "gradients are accumulated and reduced in fp32 here (Megatron's default with --bf16)"},
      {"--calculate-per-token-loss", 0, kNoEffect, "",
       "the loss is always the per-token mean over the global batch here"},
      {"--use-cpu-initialization", 0, kNoEffect, "", "weights are initialised from --seed wherever they live"},
      // Parallelism and communication.
      {"--distributed-backend", 1, kNoEffect, "", "Troupe's actors move tensors with NCCL or the CPU fabric"},
      {"--no-async-tensor-model-parallel-allreduce", 0, kNoEffect, "", "a communication-overlap switch"},
      {"--overlap-param-gather", 0, kNoEffect, "", "a communication-overlap switch"},
      {"--tp-comm-overlap", 0, kNoEffect, "", "a communication-overlap switch (Transformer Engine userbuffers)"},
      {"--distributed-timeout-minutes", 1, kNoEffect, "", "use --op-timeout (seconds a stage may stay silent)"},
      {"--pipeline-model-parallel-layout", 1, kRefused, "",
       "a layout string is not implemented: use --decoder-first-pipeline-num-layers, "
       "--decoder-last-pipeline-num-layers or --account-for-embedding/loss-in-pipeline-split (docs/train.md)"},
      // Data loading.
      {"--num-workers", 1, kNoEffect, "", "Troupe's loader has no worker processes"},
      {"--dataloader-type", 1, kOnly, "single",
       "Troupe's loader is Megatron's `single` (in order, resuming at the consumed samples); `cyclic` reshuffles "
       "every epoch and is not implemented"},
      {"--no-create-attention-mask-in-dataloader", 0, kNoEffect, "", "the causal mask is implicit in the kernel"},
      {"--no-mmap-bin-files", 0, kNoEffect, "", "the .bin files are always memory-mapped"},
      {"--reset-position-ids", 0, kRefused, "", "positions restart at EOD is not implemented"},
      {"--reset-attention-mask", 0, kRefused, "", "attention stopping at EOD is not implemented"},
      // Model features not implemented.
      // Mixture of experts: --num-experts and the --moe-* flags Troupe implements are options of
      // `troupe train` (apps/train/moe_flags.hpp, docs/train.md#mixture-of-experts).
      {"--moe-grouped-gemm", 0, kNoEffect, "", "the experts always run as grouped GEMMs here"},
      {"--moe-token-dispatcher-type", 1, kNoEffect, "",
       "every dispatcher computes the same: tokens are permuted on the device, and exchanged all-to-all under "
       "--expert-model-parallel-size"},
      {"--moe-router-dtype", 1, kOnly, "fp32", "the router always computes its logits and scores in fp32 here"},
      {"--moe-permute-fusion", 0, kNoEffect, "", kFusion},
      {"--moe-input-jitter-eps", 1, kRefused, "", "router input jitter is not implemented"},
      // FP8: --fp8-format, --fp8-recipe, --fp8-amax-*, --fp8-margin and --no-fp8-wgrad are options
      // of `troupe train` (apps/train/fp8_flags.hpp, docs/train.md#fp8-training).
      {"--fp8-param-gather", 0, kRefused, "", "FP8 parameters are not implemented: FP8 is a compute format here"},
      {"--fp8-interval", 1, kOnly, "1", "scales are updated after every step (Megatron's deprecated default)"},
      {"--first-last-layers-bf16", 0, kRefused, "", kFp8Layers},
      {"--num-layers-at-start-in-bf16", 1, kRefused, "", kFp8Layers},
      {"--num-layers-at-end-in-bf16", 1, kRefused, "", kFp8Layers},
      {"--apply-query-key-layer-scaling", 0, kRefused, "", "query-key layer scaling is not implemented"},
      {"--apply-layernorm-1p", 0, kRefused, "", "zero-centred (1 + weight) layer norms are not implemented"},
      {"--apply-residual-connection-post-layernorm", 0, kRefused, "", "only pre-norm layers are implemented"},
      {"--openai-gelu", 0, kRefused, "", "only the tanh GELU (default) and --swiglu are implemented"},
      {"--squared-relu", 0, kRefused, "", "only the tanh GELU (default) and --swiglu are implemented"},
      {"--rotary-percent", 1, kOnly, "1.0", "partial rotary embeddings are not implemented"},
      {"--rotary-interleaved", 0, kRefused, "", "interleaved rotary embeddings are not implemented"},
      {"--rotary-seq-len-interpolation-factor", 1, kRefused, "", "use --use-rope-scaling (Llama 3.1's scaling)"},
      {"--no-position-embedding", 0, kNoEffect, "",
       "no learned position table is made with --position-embedding-type rope (an error without it)"},
      {"--fp16-lm-cross-entropy", 0, kRefused, "", "the cross entropy is computed in fp32"},
      {"--data-parallel-random-init", 0, kRefused, "", "every data-parallel replica starts from the same weights"},
      // Optimizer and schedule.
      {"--optimizer", 1, kOnly, "adam", "only Adam (AdamW semantics) is implemented"},
      {"--decoupled-lr", 1, kRefused, "", "a separate learning rate for the embeddings is not implemented"},
      {"--decoupled-min-lr", 1, kRefused, "", "a separate learning rate for the embeddings is not implemented"},
      {"--start-weight-decay", 1, kRefused, "", "a weight-decay ramp is not implemented: use --weight-decay"},
      {"--end-weight-decay", 1, kRefused, "", "a weight-decay ramp is not implemented: use --weight-decay"},
      {"--weight-decay-incr-style", 1, kOnly, "constant", "a weight-decay ramp is not implemented"},
      {"--initial-loss-scale", 1, kOnly, "4294967296", kScaler},
      {"--min-loss-scale", 1, kOnly, "1", kScaler},
      {"--loss-scale-window", 1, kOnly, "1000", kScaler},
      {"--hysteresis", 1, kOnly, "2", kScaler},
      {"--rampup-batch-size", 3, kRefused, "", "a batch-size ramp is not implemented: give --global-batch-size"},
      {"--grad-reduce-in-bf16", 0, kRefused, "", "gradients are reduced in fp32; a bf16 reduction is not implemented"},
      {"--override-opt_param-scheduler", 0, kNoEffect, "",
       "the schedule always comes from this run's flags (checkpoints do not hold one)"},
      {"--use-checkpoint-opt_param-scheduler", 0, kRefused, "",
       "checkpoints do not hold a schedule: give the schedule's flags"},
      {"--manual-gc", 0, kNoEffect, "", "there is no Python garbage collector"},
      {"--manual-gc-interval", 1, kNoEffect, "", "there is no Python garbage collector"},
      {"--empty-unused-memory-level", 1, kNoEffect, "", "there is no PyTorch caching allocator to empty"},
      // Checkpointing.
      {"--ckpt-format", 1, kOnly, "troupe",
       "torch_dist, torch, zarr and fsdp_dtensor are not supported: Troupe's own format (the default) is always "
       "used; `troupe convert` moves weights to and from Hugging Face"},
      {"--use-dist-ckpt", 0, kNoEffect, "", kDistCkpt},
      {"--auto-detect-ckpt-format", 0, kNoEffect, "", kDistCkpt},
      {"--ckpt-fully-parallel-save", 0, kNoEffect, "", kDistCkpt},
      {"--ckpt-fully-parallel-load", 0, kNoEffect, "", kDistCkpt},
      {"--ckpt-assume-constant-structure", 0, kNoEffect, "", kDistCkpt},
      {"--dist-ckpt-strictness", 1, kNoEffect, "", kDistCkpt},
      {"--no-save-rng", 0, kNoEffect, "", "the RNG state is always saved (it is small)"},
      {"--exit-signal-handler", 0, kNoEffect, "",
       "the default here: SIGTERM/SIGINT finish the iteration, save with --save and exit"},
      // Logging.
      {"--log-throughput", 0, kNoEffect, "", "the iteration line always shows TFLOP/s per device"},
      {"--log-timers-to-tensorboard", 0, kNoEffect, "", kTensorBoard},
      {"--log-validation-ppl-to-tensorboard", 0, kNoEffect, "", kTensorBoard},
      {"--log-memory-to-tensorboard", 0, kNoEffect, "", kTensorBoard},
      {"--log-world-size-to-tensorboard", 0, kNoEffect, "", kTensorBoard},
      {"--log-loss-scale-to-tensorboard", 0, kNoEffect, "", kTensorBoard},
      {"--tensorboard-log-interval", 1, kNoEffect, "", kTensorBoard},
      {"--tensorboard-queue-size", 1, kNoEffect, "", kTensorBoard},
      {"--log-params-norm", 0, kNoEffect, "", "the parameter norm is not logged"},
      {"--log-num-zeros-in-grad", 0, kNoEffect, "", "zeros in the gradient are not counted"},
      {"--log-straggler", 0, kNoEffect, "",
       "the straggler report is always on here: a device over --straggler-factor times its stage peers' median busy "
       "time is named at each log line (docs/train.md)"},
      {"--straggler-minmax-count", 1, kNoEffect, "", "the straggler report names every device over --straggler-factor"},
      {"--disable-straggler-on-startup", 0, kNoEffect, "", kStragglerSwitch},
      {"--straggler-ctrlr-port", 1, kNoEffect, "", kStragglerSwitch},
      {"--timing-log-level", 1, kNoEffect, "", "per-op timings: --trace and `troupe replay` (docs/profiling.md)"},
      {"--timing-log-option", 1, kNoEffect, "", "per-op timings: --trace and `troupe replay` (docs/profiling.md)"},
      {"--profile", 0, kNoEffect, "", "profile with --trace or nsys (docs/profiling.md)"},
      {"--profile-step-start", 1, kNoEffect, "", "profile with --trace or nsys (docs/profiling.md)"},
      {"--profile-step-end", 1, kNoEffect, "", "profile with --trace or nsys (docs/profiling.md)"},
      {"--use-pytorch-profiler", 0, kNoEffect, "", "profile with --trace or nsys (docs/profiling.md)"},
      {"--wandb-project", 1, kNoEffect, "", kWandb},
      {"--wandb-exp-name", 1, kNoEffect, "", kWandb},
      {"--wandb-save-dir", 1, kNoEffect, "", kWandb},
  };
  return table;
}

void add_megatron_compat_flags(CLI::App* cmd, const std::shared_ptr<GivenMegatronFlags>& given) {
  const std::string group = "Megatron compatibility (docs/megatron-flags.md)";
  for (const MegatronFlag& f : megatron_flags()) {
    const std::string name = f.name;
    std::string help = f.status == kNoEffect ? "no effect: " : f.status == kRefused ? "not implemented: " : "";
    if (f.status == kOnly) help = std::string("only ") + f.values + ": ";
    help += f.note;
    if (f.arity == 0) {
      cmd->add_flag_callback(
             name, [given, name] { (*given)[name] = {""}; }, help)
          ->group(group);
    } else {
      cmd->add_option_function<std::vector<std::string>>(
             name, [given, name](const std::vector<std::string>& v) { (*given)[name] = v; }, help)
          ->expected(f.arity)
          ->group(group);
    }
  }
}

namespace {

// `value` is one of "a|b", as text or as the same number ("1" for "1.0").
bool accepted_value(const std::string& value, const std::string& values) {
  std::stringstream all(values);
  for (std::string v; std::getline(all, v, '|');) {
    if (v == value) return true;
    try {
      size_t used_a = 0, used_b = 0;
      const double a = std::stod(v, &used_a), b = std::stod(value, &used_b);
      if (used_a == v.size() && used_b == value.size() && a == b) return true;
    } catch (const std::exception&) {}
  }
  return false;
}

std::string joined(const std::vector<std::string>& values) {
  std::string s;
  for (const std::string& v : values) s += (s.empty() ? "" : " ") + v;
  return s;
}

}  // namespace

std::vector<std::string> check_megatron_flags(const GivenMegatronFlags& given) {
  std::vector<std::string> notes;
  for (const MegatronFlag& f : megatron_flags()) {
    const auto it = given.find(f.name);
    if (it == given.end()) continue;
    const std::string shown = f.arity == 0 ? f.name : std::string(f.name) + " " + joined(it->second);
    if (f.status == kRefused)
      TROUPE_FAIL(shown, " is not implemented in troupe train (", f.note, "): remove it (docs/megatron-flags.md)");
    if (f.status == kOnly && !accepted_value(joined(it->second), f.values))
      TROUPE_FAIL(shown, " is not supported (", f.note, "): use ", f.name, " ", f.values,
                  " or remove it (docs/megatron-flags.md)");
    notes.push_back("note: " + shown + " has no effect here: " +
                    (f.status == kOnly ? std::string("it is what Troupe does") : std::string(f.note)));
  }
  return notes;
}

std::string megatron_flags_markdown() {
  std::string md =
      "# Megatron-LM flags that `troupe train` accepts without implementing\n\n"
      "<!-- Generated from apps/train/megatron_flags.cpp by `troupe train --list-megatron-flags`; "
      "megatron_flags_test checks it is up to date. -->\n\n"
      "`troupe train` implements the flags of Megatron-LM's `pretrain_gpt.py` that GPT, Llama and Qwen recipes use "
      "(docs/train.md). The flags below are accepted too, so a Megatron launch script runs unchanged: a flag that "
      "changes nothing here prints one note at the start of the run; a flag that would change the math and is not "
      "implemented stops the run with an error naming it, it is never ignored.\n\n"
      "| Flag | Values | Status | Note |\n|---|---|---|---|\n";
  for (const MegatronFlag& f : megatron_flags()) {
    const std::string values = f.arity == 0 ? "switch" : f.arity < 0 ? "one or more" : std::to_string(f.arity);
    const std::string status = f.status == kNoEffect  ? "no effect"
                               : f.status == kRefused ? "error: not implemented"
                                                      : std::string("only `") + f.values + "` (no effect)";
    md += std::string("| `") + f.name + "` | " + values + " | " + status + " | " + f.note + " |\n";
  }
  return md;
}

}  // namespace troupe::apps
