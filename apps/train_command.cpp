// `troupe train`: pretrain a GPT with Megatron-LM's flags on this node's devices (GPUs, or
// CPU devices), pipeline-parallel through the actor runtime. Logs Megatron's iteration
// line, validation loss and perplexity every --eval-interval, a final summary, and
// optionally a text sample. SIGINT/SIGTERM stop cleanly after the current iteration. With
// --monitor-endpoint / --metrics-port the run's monitor actor publishes each log line's numbers
// live for `troupe monitor` and Prometheus (apps/train/train_monitor.hpp).
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>

#include "actors/fabric/fabric.hpp"
#include "actors/train/training_run.hpp"
#include "apps/commands.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "storage/checkpoint_ownership.hpp"
#include "apps/common/tokenizer_flags.hpp"
#include "apps/common/count_flags.hpp"
#include "apps/train/deterministic_mode.hpp"
#include "apps/train/fault_injection.hpp"
#include "apps/common/float_flags.hpp"
#include "apps/train/megatron_flags.hpp"
#include "apps/train/fp8_flags.hpp"
#include "apps/train/moe_flags.hpp"
#include "apps/train/supervisor.hpp"
#include "apps/train/straggler_report.hpp"
#include "apps/train/train_log.hpp"
#include "apps/common/monitor_flags.hpp"
#include "apps/train/train_monitor.hpp"
#include "apps/train/train_progress.hpp"
#include "apps/train/train_tensorboard.hpp"
#include "data/gpt_data.hpp"
#include "data/mock_dataset.hpp"
#include "data/tokenizer.hpp"
#include "base/check.hpp"
#include "model/gpt_chunk.hpp"
#include "model/inference/sampler.hpp"
#include "model/pipeline_split.hpp"

namespace troupe::apps {

namespace {

std::atomic<int> g_stop_signal{0};  // set by SIGINT/SIGTERM: finish the iteration, then stop
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

struct TrainOptions {
  std::string model = "gpt2-tiny";  // preset the shape flags start from
  int num_layers = 0, hidden_size = 0, ffn_hidden_size = 0, num_attention_heads = 0, num_query_groups = 0;
  int kv_channels = 0, seq_length = 0, max_position_embeddings = 0, make_vocab_size_divisible_by = 128;
  std::string normalization, position_embedding_type;
  bool swiglu = false, disable_bias_linear = false, untie = false, group_query_attention = false;
  bool use_rope_scaling = false, add_qkv_bias = false, qk_layernorm = false;
  std::string window_size;  // --window-size "LEFT,RIGHT" (Megatron's tuple)
  float rope_scaling_factor = 8.0f;
  float hidden_dropout = -1, attention_dropout = -1, init_method_std = -1, norm_epsilon = -1, rotary_base = -1;
  int64_t micro_batch_size = 4, global_batch_size = 0, train_iters = 100;
  int64_t train_samples = 0;  // --train-samples: iterations = samples / global batch (Megatron's)
  double lr = 6e-4, min_lr = 6e-5, lr_warmup_init = 0, adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8;
  double weight_decay = 0.1, clip_grad = 1.0;
  int64_t lr_warmup_iters = 0, lr_decay_iters = 0, lr_wsd_decay_iters = 0;
  int64_t lr_warmup_samples = 0, lr_decay_samples = 0, lr_wsd_decay_samples = 0;
  std::optional<double> lr_warmup_fraction;  // of the decay length, instead of the warmup iterations/samples
  std::string lr_decay_style = "cosine", lr_wsd_decay_style = "exponential";
  double exit_duration_mins = 0;  // --exit-duration-in-mins: save (with --save) and exit after this wall time
  std::shared_ptr<GivenMegatronFlags> megatron = std::make_shared<GivenMegatronFlags>();
  bool bf16 = false, fp16 = false;
  float loss_scale = 0;
  std::vector<std::string> data_path;
  std::string split = "969,30,1", data_cache_path;
  TokenizerOptions tokenizer;  // --tokenizer-type --vocab-file --merge-file --tokenizer-model --vocab-size
  bool mock_data = false, eod_mask_loss = false;
  int pipeline_size = 1, layers_per_virtual_stage = 0, group_size = 0;
  int virtual_stages_per_rank = 0;  // --num-virtual-stages-per-pipeline-rank (0: not given)
  PipelineSplit pipeline_split;     // --decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split
  int tensor_size = 1;
  int context_size = 1;              // --context-parallel-size (model/context_parallel.hpp)
  std::string cp_comm_type = "p2p";  // --cp-comm-type: only the ring (p2p)
  bool sequence_parallel = false, distributed_optimizer = false, overlap_grad_reduce = false;
  MoeFlags moe;              // --num-experts, --moe-* (apps/train/moe_flags.hpp)
  Fp8Flags fp8;              // --fp8-* (apps/train/fp8_flags.hpp)
  RecomputeFlags recompute;  // --recompute-activations, --recompute-granularity, ... (model/recompute.hpp)
  int64_t ddp_bucket_size = 40000000;
  std::string schedule = "1f1b", device = "auto";
  std::string save, load;  // --save / --load checkpoint directories
  // --ckpt-step: the iteration --load reads (default: the tracker's); --overwrite: --save may
  // rewind a directory this run does not go on from (storage/checkpoint_ownership.hpp).
  std::optional<int64_t> ckpt_step;
  bool overwrite = false;
  // --auto-restart N: run under a supervisor that restarts a failed run up to N times (apps/train/supervisor.hpp).
  std::optional<int64_t> auto_restart;
  int64_t save_interval = 0;
  bool no_save_optim = false, no_load_optim = false, no_load_rng = false, finetune = false, async_save = false;
  int most_recent_k = 0;      // keep this many checkpoints (0: all)
  int64_t exit_interval = 0;  // save (with --save) and exit at multiples of this iteration
  int devices = 0;            // 0: tensor x pipeline size (data-parallel size 1)
  int64_t eval_interval = 1000, eval_iters = 10, log_interval = 10;
  uint64_t seed = 1234;
  bool deterministic_mode = false;  // --deterministic-mode
  std::string trace;
  int64_t sample_tokens = 0;
  std::string prompt = "The";
  double op_timeout_s = 300;
  double heartbeat_timeout_s = 20;        // --heartbeat-timeout: another process silent this long fails the run
  bool check_for_nan = true;              // --check-for-nan-in-loss-and-grad (Megatron's default)
  int64_t max_consecutive_skipped = 100;  // --max-consecutive-skipped-iterations (0: no bound)

  actors::MonitorOptions monitor;  // --monitor-endpoint, --metrics-port, --metrics-host
  std::string tensorboard_dir;     // --tensorboard-dir: Megatron's scalars (apps/train/train_tensorboard.hpp)
  double peak_tflops = 0;          // per device, for MFU in the monitor
  double straggler_factor = 1.5;   // --straggler-factor (apps/train/straggler_report.hpp); 0: off
};

// Megatron's --window-size "LEFT,RIGHT" (or "(LEFT,RIGHT)"): a query sees keys LEFT before it
// through RIGHT after it, -1 unbounded. Causal models have RIGHT 0; the window is LEFT + 1 keys.
int sliding_window_from_flag(const std::string& flag) {
  std::string s = flag;
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  const size_t comma = s.find(',');
  int left = 0, right = 0;
  try {
    TROUPE_CHECK(comma != std::string::npos, "");
    size_t used = 0;
    left = std::stoi(s.substr(0, comma), &used);
    TROUPE_CHECK(used == comma, "");
    const std::string r = s.substr(comma + 1);
    right = std::stoi(r, &used);
    TROUPE_CHECK(used == r.size(), "");
  } catch (const std::exception&) {
    TROUPE_FAIL("--window-size ", flag, ": expected LEFT,RIGHT (two integers, e.g. 4095,0)");
  }
  TROUPE_CHECK(right == 0, "--window-size ", flag,
               ": a window that looks ahead (RIGHT != 0) is not implemented; GPT attention is causal (RIGHT 0)");
  TROUPE_CHECK(left >= -1, "--window-size ", flag, ": LEFT must be -1 (unbounded) or >= 0");
  return left < 0 ? 0 : left + 1;
}

GptConfig model_config(const TrainOptions& o, int64_t vocab) {
  GptConfig c = GptConfig::preset(o.model);
  auto set = [](auto& field, auto value, auto unset) {
    if (value != unset) field = value;
  };
  set(c.num_layers, o.num_layers, 0);
  set(c.hidden_size, o.hidden_size, 0);
  set(c.ffn_hidden_size, o.ffn_hidden_size, 0);
  set(c.num_attention_heads, o.num_attention_heads, 0);
  set(c.num_query_groups, o.num_query_groups, 0);
  set(c.kv_channels, o.kv_channels, 0);
  set(c.seq_length, o.seq_length, 0);
  set(c.max_position_embeddings, o.max_position_embeddings, 0);
  c.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  set(c.hidden_dropout, o.hidden_dropout, -1.0f);
  set(c.attention_dropout, o.attention_dropout, -1.0f);
  set(c.init_method_std, o.init_method_std, -1.0f);
  set(c.norm_epsilon, o.norm_epsilon, -1.0f);
  set(c.rotary_base, o.rotary_base, -1.0f);
  if (o.use_rope_scaling) {  // Megatron's: Llama 3.1's scaling with its fixed band edges and context
    c.rope_scaling = RopeScaling{};
    c.rope_scaling.llama3 = true;
    c.rope_scaling.factor = o.rope_scaling_factor;
  }
  if (!o.normalization.empty())
    c.normalization = o.normalization == "RMSNorm" ? Normalization::rmsnorm : Normalization::layernorm;
  if (!o.position_embedding_type.empty())
    c.position_embedding_type =
        o.position_embedding_type == "rope" ? PositionEmbedding::rope : PositionEmbedding::learned_absolute;
  if (o.swiglu) c.swiglu = true;
  if (o.disable_bias_linear) c.disable_bias_linear = true;
  if (o.add_qkv_bias) c.add_qkv_bias = true;
  if (o.qk_layernorm) c.qk_layernorm = true;
  if (!o.window_size.empty()) c.sliding_window = sliding_window_from_flag(o.window_size);
  if (o.untie) c.untie_embeddings_and_output_weights = true;
  TROUPE_CHECK(!o.group_query_attention || o.num_query_groups > 0, "--group-query-attention needs --num-query-groups");
  if (o.max_position_embeddings == 0 && c.position_embedding_type == PositionEmbedding::learned_absolute)
    c.max_position_embeddings = c.seq_length;
  c.vocab_size = vocab;
  c.moe = moe_config_from_flags(o.moe);
  c.validate();
  return c;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TrainOptions& o) {
  const TokenizerOptions& t = o.tokenizer;
  if (t.type != "NullTokenizer" && t.vocab_file.empty() && t.tokenizer_model.empty()) return nullptr;
  return build_tokenizer(t);
}

// What the run trains on: the model's shape, the tokenizer (vocabulary size, EOD, the text
// sample) and the training and validation loaders.
struct TrainData {
  std::unique_ptr<Tokenizer> tokenizer;  // null: --mock-data with --vocab-size
  GptConfig model;
  std::unique_ptr<DataLoader> train, valid;
  bool has_valid_split = false;
  int64_t resume_iteration = 0;  // the checkpoint's iteration when --load resumes a run
};

TrainData load_train_data(const TrainOptions& o, int64_t gbs, std::optional<int64_t> load_iteration) {
  TrainData d;
  d.tokenizer = make_tokenizer(o);
  const int64_t vocab = d.tokenizer ? d.tokenizer->vocab_size() : o.tokenizer.vocab_size;
  TROUPE_CHECK(vocab > 0,
               "no vocabulary: pass --vocab-file/--merge-file, --tokenizer-model, or --vocab-size with --mock-data");
  d.model = model_config(o, vocab);

  // Data: Megatron's sample counts per split.
  const int64_t train_samples = o.train_iters * gbs;
  const int64_t eval_runs = o.eval_interval > 0 ? o.train_iters / o.eval_interval + 1 : 1;
  const int64_t valid_samples = eval_runs * o.eval_iters * o.micro_batch_size;
  std::array<std::shared_ptr<const SampleSource>, 3> splits;
  if (o.mock_data) {
    splits[0] = std::make_shared<MockDataset>(train_samples, d.model.seq_length, vocab, o.seed);
    splits[1] = std::make_shared<MockDataset>(valid_samples, d.model.seq_length, vocab, o.seed + 1);
  } else {
    TROUPE_CHECK(!o.data_path.empty(), "--data-path is required (or --mock-data)");
    GptDataOptions dopt;
    dopt.data_path = o.data_path;
    dopt.split = o.split;
    dopt.sequence_length = d.model.seq_length;
    dopt.seed = uint32_t(o.seed);
    dopt.cache_path = o.data_cache_path;
    // The test split is not used by training (no --test at the end yet): ask it for nothing.
    splits = build_gpt_datasets(dopt, {train_samples, valid_samples, 0});
  }
  TROUPE_CHECK(splits[0] && splits[0]->size() >= train_samples, "the training split has ",
               splits[0] ? splits[0]->size() : 0, " samples, ", train_samples, " are needed");
  DataLoaderOptions lopt{.micro_batch_size = o.micro_batch_size,
                         .eod = d.tokenizer ? d.tokenizer->eod() : -1,
                         .eod_mask_loss = o.eod_mask_loss};
  // A resumed run's loader starts where the checkpoint's stopped (Megatron's consumed_samples).
  if (!o.load.empty() && !o.finetune) {  // --finetune: weights only, training from iteration 0
    const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(o.load, load_iteration);
    d.resume_iteration = meta.iteration;
    lopt.consumed_samples = meta.consumed_samples;
  }
  TROUPE_CHECK(o.save_interval >= 0, "--save-interval must be >= 0, got ", o.save_interval);
  TROUPE_CHECK(o.save_interval == 0 || !o.save.empty(), "--save-interval needs --save");
  TROUPE_CHECK(o.exit_interval >= 0, "--exit-interval must be >= 0, got ", o.exit_interval);
  TROUPE_CHECK(o.most_recent_k >= 0, "--most-recent-k must be >= 0, got ", o.most_recent_k);
  TROUPE_CHECK(!o.finetune || !o.load.empty(), "--finetune needs --load");
  d.train = std::make_unique<DataLoader>(splits[0], lopt);
  lopt.consumed_samples = 0;  // validation always starts at its beginning
  if (splits[1] && o.eval_iters > 0) d.valid = std::make_unique<DataLoader>(splits[1], lopt);
  d.has_valid_split = splits[1] != nullptr;
  return d;
}

// Megatron's scheduler lengths, in samples (training.py get_optimizer_param_scheduler): from the
// *-iters flags times the global batch with --train-iters, from the *-samples flags with --train-samples.
LrSchedule lr_schedule(const TrainOptions& o, int64_t gbs) {
  LrSchedule s{.lr = o.lr,
               .min_lr = o.min_lr,
               .warmup_init = o.lr_warmup_init,
               .style = lr_decay_style_from_name(o.lr_decay_style),
               .wsd_style = wsd_decay_style_from_name(o.lr_wsd_decay_style),
               .step_size = gbs};
  if (o.train_samples > 0) {
    TROUPE_CHECK(o.lr_decay_iters == 0 && o.lr_warmup_iters == 0 && o.lr_wsd_decay_iters == 0,
                 "--train-samples counts the schedule in samples: use --lr-decay-samples, --lr-warmup-samples and "
                 "--lr-wsd-decay-samples instead of the *-iters flags");
    s.decay_iters = o.lr_decay_samples > 0 ? o.lr_decay_samples : o.train_samples;
    s.warmup_iters = double(o.lr_warmup_samples);
    s.wsd_decay_iters = o.lr_wsd_decay_samples;
  } else {
    TROUPE_CHECK(o.lr_decay_samples == 0 && o.lr_warmup_samples == 0 && o.lr_wsd_decay_samples == 0,
                 "--lr-decay-samples, --lr-warmup-samples and --lr-wsd-decay-samples need --train-samples; with "
                 "--train-iters use the *-iters flags");
    s.decay_iters = (o.lr_decay_iters > 0 ? o.lr_decay_iters : o.train_iters) * gbs;
    s.warmup_iters = double(o.lr_warmup_iters * gbs);
    s.wsd_decay_iters = o.lr_wsd_decay_iters * gbs;
  }
  if (o.lr_warmup_fraction) {
    TROUPE_CHECK(o.lr_warmup_iters == 0 && o.lr_warmup_samples == 0,
                 "--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are exclusive: give one");
    s.warmup_iters = *o.lr_warmup_fraction * double(s.decay_iters);
  }
  TROUPE_CHECK(s.style != LrDecayStyle::wsd || s.wsd_decay_iters > 0,
               "--lr-decay-style WSD needs --lr-wsd-decay-iters (or --lr-wsd-decay-samples with --train-samples)");
  TROUPE_CHECK(s.wsd_decay_iters <= s.decay_iters, "--lr-wsd-decay-iters/samples (", s.wsd_decay_iters / gbs,
               " iterations) is longer than the decay (", s.decay_iters / gbs, " iterations)");
  return s;
}

// --pipeline-schedule zb-h1 / zb-v: what GptChunk::backward_input cannot split yet, and what the
// schedules do not place, refused before the run.
void check_zero_bubble_run(const TrainOptions& o, const GptConfig& model, const actors::TrainingConfig& cfg) {
  const std::string flag = "--pipeline-schedule " + o.schedule;
  const schedules::Schedule asked = schedules::schedule_from_name(o.schedule);
  if (asked == schedules::Schedule::zb_h1)
    TROUPE_CHECK(cfg.parallel.virtual_chunks == 1, flag, " runs one model chunk per stage: drop ",
                 o.layers_per_virtual_stage > 0 ? "--num-layers-per-virtual-pipeline-stage"
                                                : "--num-virtual-stages-per-pipeline-rank",
                 " or use --pipeline-schedule 1f1b (interleaved)");
  if (asked == schedules::Schedule::zb_v) {
    TROUPE_CHECK(o.pipeline_size > 1, flag,
                 " needs --pipeline-model-parallel-size > 1 (it places two chunks on each stage); use 1f1b on one "
                 "stage");
    TROUPE_CHECK(o.group_size == 0, flag,
                 " has no microbatch groups: drop --microbatch-group-size-per-vp-stage (interleaving's)");
    TROUPE_CHECK(cfg.parallel.split.even(), flag,
                 " with an uneven split (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers, "
                 "--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split) is not "
                 "implemented: its V puts the embedding and the LM head on stage 0; drop the flags or use 1f1b");
  }
  TROUPE_CHECK(!model.moe.enabled(), flag, " with --num-experts (MoE layers) is not implemented: use 1f1b");
  TROUPE_CHECK(!cfg.recompute.enabled(), flag,
               " with activation recompute (--recompute-activations, --recompute-granularity) is not implemented: "
               "drop the recompute flags or use 1f1b");
  TROUPE_CHECK(o.context_size == 1, flag, " with --context-parallel-size > 1 is not implemented: use 1f1b");
}

// The flags' parallel layout, devices, optimizer and schedule; `devices` counts every process's.
// The schedule, the layer split and the chunks per stage from the pipeline flags.
void set_pipeline_schedule(const TrainOptions& o, int num_layers, actors::ParallelConfig& par) {
  par.schedule = schedules::schedule_from_name(o.schedule);
  par.split = o.pipeline_split;
  // Megatron's arguments.py: chunks per stage from one of the two flags, never both.
  TROUPE_CHECK(o.layers_per_virtual_stage == 0 || o.virtual_stages_per_rank == 0,
               "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, not both");
  if (o.layers_per_virtual_stage > 0)
    par.virtual_chunks =
        chunks_from_layers_per_virtual_stage(num_layers, o.pipeline_size, o.layers_per_virtual_stage, o.pipeline_split);
  if (o.virtual_stages_per_rank > 0) par.virtual_chunks = o.virtual_stages_per_rank;
  if (par.schedule == schedules::Schedule::zb_v) {
    // ZB-V's V: two chunks per stage, whatever the flags say, as long as they say the same.
    TROUPE_CHECK(o.layers_per_virtual_stage == 0 || par.virtual_chunks == 2,
                 "--pipeline-schedule zb-v places two model chunks on each stage: --num-layers-per-virtual-pipeline-"
                 "stage must then be --num-layers / (2 x --pipeline-model-parallel-size), or drop it");
    TROUPE_CHECK(o.virtual_stages_per_rank == 0 || o.virtual_stages_per_rank == 2,
                 "--pipeline-schedule zb-v places two model chunks on each stage: --num-virtual-stages-per-pipeline-"
                 "rank must be 2, or drop it");
    par.virtual_chunks = 2;
  } else if (par.virtual_chunks > 1) {
    par.schedule = schedules::Schedule::interleaved_1f1b;
  }
  par.group_size = o.group_size;
}

actors::TrainingConfig training_config(const TrainOptions& o, const GptConfig& model, int processes, bool cuda,
                                       int64_t gbs, int& devices) {
  actors::TrainingConfig cfg;
  cfg.model = model;
  cfg.parallel.pipeline_size = o.pipeline_size;
  cfg.parallel.tensor_size = o.tensor_size;
  cfg.parallel.context_size = o.context_size;
  // Megatron's layout: data-parallel size = devices / (tensor size x context size x pipeline size).
  TROUPE_CHECK(o.tensor_size >= 1 && o.pipeline_size >= 1, "--tensor-model-parallel-size (", o.tensor_size,
               ") and --pipeline-model-parallel-size (", o.pipeline_size, ") must be >= 1");
  TROUPE_CHECK(o.context_size >= 1, "--context-parallel-size must be >= 1, got ", o.context_size);
  TROUPE_CHECK(o.cp_comm_type == "p2p", "--cp-comm-type ", o.cp_comm_type,
               " is not implemented: only p2p (the ring of key/value blocks) is; drop the flag or pass p2p");
  const int model_parallel = o.tensor_size * o.pipeline_size * o.context_size;
  // --devices counts this process's devices; the run has that many in every process.
  const int local_devices = o.devices > 0 ? o.devices : std::max(1, model_parallel / processes);
  devices = local_devices * processes;
  TROUPE_CHECK(devices % model_parallel == 0, "--devices (", local_devices, " per process x ", processes,
               " processes) must be a multiple of --tensor-model-parallel-size (", o.tensor_size,
               ") times --pipeline-model-parallel-size (", o.pipeline_size, ") times --context-parallel-size (",
               o.context_size, ")");
  cfg.parallel.data_size = devices / model_parallel;
  cfg.parallel.sequence_parallel = o.sequence_parallel && o.tensor_size > 1;
  cfg.parallel.distributed_optimizer = o.distributed_optimizer;
  cfg.parallel.overlap_grad_reduce = o.overlap_grad_reduce;
  cfg.parallel.expert_size = o.moe.expert_model_parallel_size;
  cfg.parallel.moe_shared_expert_overlap = o.moe.shared_expert_overlap;
  cfg.parallel.moe_all_to_all_on_compute_stream = o.moe.all_to_all_on_compute_stream;
  cfg.parallel.overlap_moe_expert_parallel_comm = o.moe.overlap_expert_parallel_comm;
  cfg.parallel.expert_tensor_size = o.moe.expert_tensor_parallel_size;
  TROUPE_CHECK(o.ddp_bucket_size >= 1, "--ddp-bucket-size must be >= 1, got ", o.ddp_bucket_size);
  cfg.parallel.bucket_elements = o.ddp_bucket_size;
  set_pipeline_schedule(o, model.num_layers, cfg.parallel);
  cfg.recompute = recompute_config_from_flags(o.recompute);
  if (cfg.recompute.enabled()) {
    int most_layers = 0;  // of any pipeline chunk
    for (const ChunkLayers& c :
         pipeline_split(model.num_layers, o.pipeline_size, cfg.parallel.virtual_chunks, cfg.parallel.split))
      most_layers = std::max(most_layers, c.num_layers);
    check_recompute(cfg.recompute, most_layers);
  }
  cfg.fp8 = fp8_recipe_from_flags(o.fp8);
  if (schedules::splits_backward(schedules::schedule_from_name(o.schedule))) check_zero_bubble_run(o, model, cfg);
  cfg.devices.cuda = cuda;
  cfg.devices.cpu_devices = cuda ? 0 : local_devices;
  cfg.devices.compute = !cuda ? DType::f32 : (o.fp16 ? DType::f16 : DType::bf16);
  cfg.optimizer.adam = {.lr = 0,
                        .beta1 = float(o.adam_beta1),
                        .beta2 = float(o.adam_beta2),
                        .eps = float(o.adam_eps),
                        .weight_decay = float(o.weight_decay)};
  cfg.optimizer.clip_grad = float(o.clip_grad);
  cfg.lr = lr_schedule(o, gbs);
  cfg.loss_scale = o.loss_scale;
  cfg.micro_batch_size = o.micro_batch_size;
  cfg.global_batch_size = gbs;
  cfg.train_iters = o.train_iters;
  cfg.seed = o.seed;
  cfg.trace_path = o.trace;
  cfg.time_ops = o.monitor.enabled();  // the monitor gets the trace too
  cfg.op_timeout = std::chrono::milliseconds(int64_t(o.op_timeout_s * 1000));
  cfg.heartbeat_timeout = std::chrono::milliseconds(int64_t(o.heartbeat_timeout_s * 1000));
  cfg.failed_shutdown_limit = std::chrono::seconds(30);  // a failed run never hangs on its way out
  cfg.check_for_nan = o.check_for_nan;
  cfg.max_consecutive_skipped = o.max_consecutive_skipped;
  return cfg;
}

void print_run_header(const TrainOptions& o, const actors::TrainingConfig& cfg, int devices) {
  const GptConfig& model = cfg.model;
  std::printf(
      "troupe train: %d layers, hidden %d, %d heads (%d query groups), seq %d, vocab %ld (padded %ld), "
      "%.2fM parameters\n",
      model.num_layers, model.hidden_size, model.num_attention_heads, model.query_groups(), model.seq_length,
      long(model.vocab_size), long(model.padded_vocab_size()), double(model.num_parameters()) / 1e6);
  std::printf(
      "  %d %s: tensor %d%s x context %d x pipeline %d x %d chunks (%s) x data %d%s, micro batch %ld, global batch "
      "%ld, %ld iterations, %s\n",
      devices, cfg.devices.cuda ? "GPUs" : "CPU devices", o.tensor_size,
      cfg.parallel.sequence_parallel ? " (sequence)" : "", o.context_size, o.pipeline_size, cfg.parallel.virtual_chunks,
      schedules::schedule_name(cfg.parallel.schedule), cfg.parallel.data_size,
      cfg.parallel.distributed_optimizer ? " (distributed optimizer)" : "", long(o.micro_batch_size),
      long(cfg.global_batch_size), long(o.train_iters), dtype_name(cfg.devices.compute));
  if (cfg.recompute.enabled())
    std::printf("  activation recompute: %s\n", recompute_description(cfg.recompute).c_str());
  if (cfg.fp8.enabled)
    std::printf("  fp8: %s; the transformer layers' linear GEMMs%s\n", fp8_recipe_str(cfg.fp8).c_str(),
                cfg.devices.cuda ? "" : " (emulated on CPU devices)");
  if (model.moe.enabled())
    std::printf("  mixture of experts: %d experts, top-%d, layers %s, %s; %.2fM parameters active per token\n",
                model.moe.num_experts, model.moe.moe_router_topk, moe_layer_freq_str(model.moe.moe_layer_freq).c_str(),
                model.moe.drops_tokens() ? "capacity-dropping" : "dropless",
                double(model.num_active_parameters()) / 1e6);
  if (!cfg.parallel.split.even()) {  // throws naming the flags for a split that cannot be made
    const std::vector<ChunkLayers> chunks =
        pipeline_split(model.num_layers, o.pipeline_size, cfg.parallel.virtual_chunks, cfg.parallel.split);
    std::printf("  uneven pipeline split, layers of each chunk (stage 0 first, chunk by chunk):");
    for (const ChunkLayers& c : chunks) std::printf(" %d", c.num_layers);
    std::printf("\n");
  }
  std::fflush(stdout);
}

// --save: saves (synchronous or --async-save) and reports each checkpoint once it is durable.
class Checkpointer {
 public:
  Checkpointer(const TrainOptions& o, actors::TrainingRun& run) : o_(o), run_(run) {
    // The checkpoint of the iteration just loaded is already there.
    saved_at_ = !o.load.empty() && same_checkpoint_dir(o.load, o.save) ? run.iteration() : -1;
    options_ = {.optimizer = !o.no_save_optim, .keep_last = o.most_recent_k, .files = {}};
    // The tokenizer goes with the weights (`troupe generate` reads it from there).
    options_.files = tokenizer_source_files(o.tokenizer);
    if (!o.save.empty()) run.reserve_save_buffers(options_.optimizer);
  }

  void save_now() {
    std::printf("saving checkpoint at iteration %ld to %s%s\n", long(run_.iteration()), o_.save.c_str(),
                o_.async_save ? " (asynchronous)" : "");
    std::fflush(stdout);
    if (auto c = run_.finish_save(/*wait=*/true)) report(*c);  // the previous --async-save
    run_.start_save(o_.save, options_);
    if (!o_.async_save) report(*run_.finish_save(/*wait=*/true));
    saved_at_ = run_.iteration();
  }
  // An --async-save that has finished (wait: until the pending one has).
  void finish(bool wait) {
    if (auto c = run_.finish_save(wait)) report(*c);
  }
  // Megatron saves at the end too.
  void save_at_end() {
    if (!o_.save.empty() && saved_at_ != run_.iteration()) save_now();
    finish(/*wait=*/true);
  }

 private:
  void report(const actors::SavedCheckpoint& c) {
    std::printf(
        "  successfully saved checkpoint from iteration %ld to %s: training stalled %.3f s, written in %.3f s "
        "(%.1f MB/s from this process), committed %.3f s after the snapshot\n",
        long(c.iteration), o_.save.c_str(), c.stall_seconds, c.write_seconds,
        double(c.bytes) / 1e6 / std::max(c.write_seconds, 1e-9), c.total_seconds);
    std::fflush(stdout);
  }

  const TrainOptions& o_;
  actors::TrainingRun& run_;
  actors::SaveOptions options_;
  int64_t saved_at_ = -1;
};

// The iterations since the last log line: Megatron's averages over them.
class LogAccumulator {
 public:
  LogAccumulator(const TrainOptions& o, const actors::TrainingConfig& cfg, int devices)
      : train_iters_(o.train_iters),
        gbs_(cfg.global_batch_size),
        seq_(cfg.model.seq_length),
        devices_(devices),
        moe_load_balancing_(cfg.model.moe.load_balancing_coeff() > 0),
        moe_z_loss_(cfg.model.moe.moe_z_loss_coeff > 0) {
    flops_per_token_ = 6.0 * double(cfg.model.num_active_parameters()) +
                       12.0 * cfg.model.num_layers * cfg.model.hidden_size * double(cfg.model.seq_length);
    reset();
  }

  void add(const IterationStats& s, double seconds) {
    seconds_ += seconds;
    ++count_;
    if (s.skipped) {
      ++window_.skipped;
      if (!std::isfinite(s.loss)) ++window_.nan;  // Megatron's: a skipped iteration with an inf/NaN loss
    } else {
      loss_ += s.loss;
      norm_ += s.grad_norm;
      moe_add(s.moe);
    }
  }

  // The window's line numbers, then a fresh window.
  LogWindow close(const IterationStats& s, int64_t consumed_samples) {
    LogWindow w = window_;
    const int64_t counted = count_ - w.skipped;
    w.iteration = s.iteration;
    w.consumed_samples = consumed_samples;
    w.ms_per_iteration = seconds_ / double(count_) * 1e3;
    w.tflops_per_device =
        double(gbs_ * seq_) * flops_per_token_ / (seconds_ / double(count_)) / 1e12 / double(devices_);
    w.lr = s.next_lr;  // Megatron prints the scheduler's lr after the iteration's step
    w.loss = counted > 0 ? loss_ / double(counted) : NAN;
    w.loss_scale = s.loss_scale;
    w.grad_norm = counted > 0 ? norm_ / double(counted) : NAN;
    w.iterations = count_;
    moe_close(w, counted);
    reset();
    return w;
  }

 private:
  void reset() {
    window_ = LogWindow{.train_iters = train_iters_, .global_batch_size = gbs_};
    seconds_ = loss_ = norm_ = 0;
    count_ = 0;
    moe_ = MoeIterationStats{};
  }
  // MoE: the router losses summed over the window, the last iteration's expert load.
  void moe_add(const MoeIterationStats& m) {
    if (!m.any()) return;
    moe_.load_balancing_loss += m.load_balancing_loss;
    moe_.z_loss += m.z_loss;
    moe_.expert_load = m.expert_load;
  }
  void moe_close(LogWindow& w, int64_t counted) const {
    if (!moe_.any() || counted == 0) return;
    if (moe_load_balancing_) w.load_balancing_loss = moe_.load_balancing_loss / double(counted);
    if (moe_z_loss_) w.z_loss = moe_.z_loss / double(counted);
    w.expert_load = moe_.expert_load;
  }

  int64_t train_iters_, gbs_, seq_;
  int devices_;
  double flops_per_token_ = 0;
  LogWindow window_;
  double seconds_ = 0, loss_ = 0, norm_ = 0;
  int64_t count_ = 0;
  bool moe_load_balancing_ = false, moe_z_loss_ = false;  // which MoE losses the log line shows
  MoeIterationStats moe_;
};

// What the iteration loop leaves for the summary.
struct LoopTotals {
  double train_seconds = 0;  // inside train_iteration()
  double last_loss = 0;      // of the last iteration not skipped
};

// Iterations until --train-iters, --exit-interval or a stop signal: Megatron's log line every
// --log-interval, validation every --eval-interval, a checkpoint every --save-interval.
// --exit-duration-in-mins: has the run been going that long? The processes' longest time decides,
// so every process stops after the same iteration (Megatron's MAX all-reduce).
bool past_exit_duration(const TrainOptions& o, actors::Fabric& fabric, std::chrono::steady_clock::time_point start) {
  if (o.exit_duration_mins <= 0) return false;
  std::vector<double> elapsed_mins = {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                                      60};
  fabric.all_reduce(elapsed_mins, ReduceOp::max);
  return elapsed_mins[0] > o.exit_duration_mins;
}

LoopTotals run_iterations(const TrainOptions& o, const actors::TrainingConfig& cfg, int devices,
                          actors::TrainingRun& run, bool has_valid_split, Checkpointer& saver,
                          TrainTensorBoard& tensorboard, actors::Fabric& fabric) {
  const auto start = std::chrono::steady_clock::now();
  LoopTotals totals;
  LogAccumulator window(o, cfg, devices);
  TrainProgress progress(o.train_iters, start);
  const actors::ParallelConfig& p = cfg.parallel;
  StragglerWindow stragglers(
      {.tensor = p.tensor_size, .context = p.context_size, .data = p.data_size, .pipeline = p.pipeline_size},
      o.straggler_factor);
  const int64_t gbs = cfg.global_batch_size, tokens_per_iteration = gbs * cfg.model.seq_length;
  while (run.iteration() < o.train_iters && g_stop_signal == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const IterationStats s = run.train_iteration();
    fail_if_fault_injected(s.iteration);  // a test hook (docs/testing.md)
    saver.finish(/*wait=*/false);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tensorboard.iteration(s, run.consumed_samples(), gbs);
    totals.train_seconds += dt;
    window.add(s, dt);
    progress.add(dt);
    stragglers.add(s);
    if (!s.skipped) totals.last_loss = s.loss;
    if (s.iteration % o.log_interval == 0 || s.iteration == o.train_iters) {
      LogWindow line = window.close(s, run.consumed_samples());
      progress.stamp(line);
      stragglers.stamp(line);
      std::printf("%s\n", iteration_line(line).c_str());
      for (const std::string& straggler : line.stragglers) std::printf(" %s\n", straggler.c_str());
      std::fflush(stdout);
      publish_log_line(run, line, tokens_per_iteration, o.peak_tflops);
      tensorboard.log_line(line, run);
    }
    if (o.eval_interval > 0 && o.eval_iters > 0 && s.iteration % o.eval_interval == 0 && has_valid_split) {
      const double valid = run.evaluate(o.eval_iters);
      std::printf("%s\n", validation_block("iteration " + std::to_string(s.iteration), valid).c_str());
      publish_validation(run, s.iteration, valid);
      tensorboard.validation(s.iteration, valid, run.consumed_samples());
    }
    if (o.save_interval > 0 && s.iteration % o.save_interval == 0) saver.save_now();
    if (o.exit_interval > 0 && s.iteration % o.exit_interval == 0) {
      std::printf("exiting at iteration %ld (--exit-interval %ld)\n", long(s.iteration), long(o.exit_interval));
      break;
    }
    if (past_exit_duration(o, fabric, start)) {
      std::printf("exiting at iteration %ld: --exit-duration-in-mins %g has passed\n", long(s.iteration),
                  o.exit_duration_mins);
      break;
    }
  }
  return totals;
}

void print_summary(actors::TrainingRun& run, const actors::TrainingConfig& cfg, const LoopTotals& totals,
                   double wall_seconds) {
  std::printf(
      "summary: %ld iterations, %ld samples, last lm loss %.4f, %.1f s (%.0f tokens/s)\n", long(run.iteration()),
      long(run.consumed_samples()), totals.last_loss, wall_seconds,
      double(run.iteration() * cfg.global_batch_size * cfg.model.seq_length) / std::max(totals.train_seconds, 1e-9));
  const actors::TrainingRun::MemoryReport m = run.memory_report();
  const double gib = 1024.0 * 1024.0 * 1024.0, n = double(std::max<int64_t>(m.parameters, 1));
  std::printf(
      "memory of the first device: %.2fM parameters; parameters %.2f GiB, gradients %.2f GiB, optimizer "
      "state %.2f GiB: %.2f bytes per parameter; device memory in use %.2f GiB\n",
      double(m.parameters) / 1e6, double(m.parameter_bytes) / gib, double(m.gradient_bytes) / gib,
      double(m.optimizer_bytes) / gib, double(m.parameter_bytes + m.gradient_bytes + m.optimizer_bytes) / n,
      double(m.device_in_use) / gib);
  std::fflush(stdout);
}

// --sample-tokens: the trained model, gathered onto one device, continues --prompt.
void print_sample(const TrainOptions& o, const actors::TrainingConfig& cfg, actors::TrainingRun& run,
                  const Tokenizer& tokenizer) {
  const Context ctx = cfg.devices.cuda ? Context::cuda(0) : Context::cpu();
  GptChunk whole(ctx, cfg.model, ChunkSpec::whole_model(), cfg.devices.compute);
  whole.load_weights(run.gather_weights());
  const SamplingParams so = training_sample_params(o.sample_tokens, o.seed);
  const std::vector<int32_t> out = generate(whole, tokenizer.encode(o.prompt), so);
  std::printf("sample (temperature %.1f, top-k %d):\n%s%s\n", so.temperature, so.top_k, o.prompt.c_str(),
              tokenizer.decode(out).c_str());
}

// --load into the built run, as Megatron says it: which checkpoint, then that it loaded.
void load_train_checkpoint(const TrainOptions& o, int64_t resume_iteration, std::optional<int64_t> load_iteration,
                           actors::TrainingRun& run) {
  std::printf("loading checkpoint from %s at iteration %ld%s\n", o.load.c_str(), long(resume_iteration),
              o.finetune ? " (--finetune: weights only)" : "");
  run.load_checkpoint(
      o.load,
      {.optimizer = !o.no_load_optim, .rng = !o.no_load_rng, .finetune = o.finetune, .iteration = load_iteration});
  std::printf("  successfully loaded checkpoint from %s at iteration %ld\n", o.load.c_str(), long(run.iteration()));
  std::fflush(stdout);
}

int train(TrainOptions o) {
  const DeterministicMode deterministic(o.deterministic_mode);
  // Megatron's flags that change nothing here: one note each; the unimplemented ones fail first.
  const std::vector<std::string> notes = check_megatron_flags(*o.megatron);
  TROUPE_CHECK(!o.megatron->contains("--no-position-embedding") || o.position_embedding_type == "rope",
               "--no-position-embedding needs --position-embedding-type rope (a GPT without any position "
               "embedding is not implemented)");
  // Under mpirun: one process per node (or per GPU), all running this same command. Process 0
  // prints; the others stay quiet on stdout (errors still reach stderr).
  const std::shared_ptr<actors::Fabric> fabric = actors::Fabric::init();
  // A run that fails (an exception leaving this function) ends without waiting for the other
  // processes: one that is stopped or gone would otherwise hold this one's exit forever.
  struct EndFabricOnFailure {
    actors::Fabric& fabric;
    const int exceptions = std::uncaught_exceptions();
    ~EndFabricOnFailure() {
      if (std::uncaught_exceptions() > exceptions) fabric.end_without_waiting();
    }
  } const end_on_failure{*fabric};
  if (fabric->process() != 0) TROUPE_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "silencing stdout");
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  const bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  TROUPE_CHECK(!(o.bf16 && o.fp16), "--bf16 and --fp16 are exclusive");
  TROUPE_CHECK(cuda || (!o.bf16 && !o.fp16), "--bf16/--fp16 need GPUs; CPU devices compute in f32");
  const int64_t gbs = o.global_batch_size > 0 ? o.global_batch_size : o.micro_batch_size;
  TROUPE_CHECK(gbs % o.micro_batch_size == 0, "--global-batch-size ", gbs, " is not a multiple of --micro-batch-size ",
               o.micro_batch_size, " (this node has one data-parallel rank)");
  if (o.train_samples > 0) {  // Megatron's: whole global batches, the remainder is not trained
    o.train_iters = o.train_samples / gbs;
    TROUPE_CHECK(o.train_iters > 0, "--train-samples ", o.train_samples, " is less than one global batch (", gbs, ")");
  }

  // --load's iteration, and --save's directory claimed (apps/common/checkpoint_flags.hpp).
  const std::optional<int64_t> load_iteration = prepare_train_checkpoints(
      {.save = o.save, .load = o.load, .ckpt_step = o.ckpt_step, .finetune = o.finetune, .overwrite = o.overwrite},
      *fabric);
  TrainData data = load_train_data(o, gbs, load_iteration);
  int devices = 0;
  const actors::TrainingConfig cfg = training_config(o, data.model, fabric->processes(), cuda, gbs, devices);
  print_run_header(o, cfg, devices);

  actors::TrainingRun run(cfg, std::move(data.train), std::move(data.valid));
  if (!o.load.empty()) load_train_checkpoint(o, data.resume_iteration, load_iteration, run);
  if (o.monitor.enabled() && fabric->process() == 0)  // one publisher per run: process 0's numbers are the run's
    start_train_monitor(run, o.monitor,
                        train_monitor_hello(cfg, {.model = o.model,
                                                  .devices = devices,
                                                  .log_interval = o.log_interval,
                                                  .eval_interval = o.eval_interval,
                                                  .start_iteration = run.iteration(),
                                                  .peak_tflops = o.peak_tflops}));
  TrainTensorBoard tensorboard(o.tensorboard_dir, cfg.model.moe.load_balancing_coeff() > 0,
                               cfg.model.moe.moe_z_loss_coeff > 0);
  Checkpointer saver(o, run);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  const auto start = std::chrono::steady_clock::now();
  const LoopTotals totals = run_iterations(o, cfg, devices, run, data.has_valid_split, saver, tensorboard, *fabric);
  saver.save_at_end();
  if (g_stop_signal != 0)
    std::printf("troupe train: stopped by signal %d after iteration %ld\n", int(g_stop_signal), long(run.iteration()));
  // A final validation unless the last iteration just ran one.
  const bool evaluated_last = o.eval_interval > 0 && run.iteration() % o.eval_interval == 0;
  if (data.has_valid_split && o.eval_iters > 0 && !evaluated_last) {
    const double valid_loss = run.evaluate(o.eval_iters);  // NaN too: a diverged run shows it
    std::printf("%s\n", validation_block("the end of training", valid_loss).c_str());
    publish_validation(run, run.iteration(), valid_loss);
    tensorboard.validation(run.iteration(), valid_loss, run.consumed_samples());
  }
  print_summary(run, cfg, totals, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  publish_end(run, g_stop_signal);
  if (o.sample_tokens > 0 && data.tokenizer) print_sample(o, cfg, run, *data.tokenizer);
  return g_stop_signal != 0 ? 130 : 0;
}

}  // namespace

// Longer than our functions usually are: the flag table, one Megatron flag a line, by --help section.
// NOLINTNEXTLINE(readability-function-size)
void add_train_command(CLI::App& app, CommandRunner& run) {
  auto* cmd = app.add_subcommand("train", "Pretrain a GPT (Megatron-LM flags) on this node's GPUs or CPU devices");
  auto o = std::make_shared<TrainOptions>();
  cmd->option_defaults()->always_capture_default();  // --help shows every option's default
  // Shape flags left out keep the --model preset's value: no default of their own to show.
  auto from_preset = [](CLI::Option* opt) {
    opt->default_str("")->description(opt->get_description() + " (default: the --model preset's)");
  };
  const CLI::Validator positive = positive_count(), non_negative = non_negative_count();

  cmd->option_defaults()->group("Model");
  static std::string config_help;  // --config is expanded by main() before parsing; listed here for --help
  cmd->add_option("--config", config_help, "read flags from a file of `key = value` lines (command-line flags win)")
      ->group("Options");
  cmd->add_option("--model", o->model,
                  "preset the shape flags start from: gpt2-124m, gpt2-350m, gpt2-tiny, llama-tiny");
  from_preset(cmd->add_option("--num-layers", o->num_layers, "transformer layers")->check(positive));
  from_preset(cmd->add_option("--hidden-size", o->hidden_size, "model width")->check(positive));
  from_preset(cmd->add_option("--ffn-hidden-size", o->ffn_hidden_size, "MLP width (4 x hidden for a preset's GPT)")
                  ->check(positive));
  from_preset(cmd->add_option("--num-attention-heads", o->num_attention_heads, "query heads")->check(positive));
  cmd->add_flag("--group-query-attention", o->group_query_attention,
                "grouped-query attention (with --num-query-groups)");
  from_preset(cmd->add_option("--num-query-groups", o->num_query_groups, "key/value heads (GQA)")->check(positive));
  from_preset(cmd->add_option("--kv-channels", o->kv_channels, "head dimension (hidden / heads if the preset has none)")
                  ->check(positive));
  from_preset(cmd->add_option("--seq-length", o->seq_length, "tokens per sample")->check(positive));
  from_preset(cmd->add_option("--max-position-embeddings", o->max_position_embeddings,
                              "rows of the learned position table (--seq-length if the preset has none)")
                  ->check(positive));
  cmd->add_option("--make-vocab-size-divisible-by", o->make_vocab_size_divisible_by,
                  "pad the vocabulary to a multiple of this times TP")
      ->check(positive);
  from_preset(cmd->add_option("--normalization", o->normalization, "LayerNorm or RMSNorm")
                  ->check(CLI::IsMember({"LayerNorm", "RMSNorm"})));
  from_preset(cmd->add_option("--norm-epsilon", o->norm_epsilon, "epsilon of the norms")->check(finite_float()));
  from_preset(cmd->add_option("--position-embedding-type", o->position_embedding_type, "learned_absolute or rope")
                  ->check(CLI::IsMember({"learned_absolute", "rope"})));
  from_preset(cmd->add_option("--rotary-base", o->rotary_base, "RoPE base (theta)")->check(finite_float()));
  auto* rope_scaling =
      cmd->add_flag("--use-rope-scaling", o->use_rope_scaling,
                    "Llama 3.1's RoPE frequency scaling (low/high frequency factors 1 and 4, original context 8192)");
  cmd->add_option("--rope-scaling-factor", o->rope_scaling_factor, "with --use-rope-scaling")
      ->check(finite_float())
      ->needs(rope_scaling);
  cmd->add_flag("--swiglu", o->swiglu, "SwiGLU MLP instead of GELU");
  cmd->add_flag("--disable-bias-linear", o->disable_bias_linear, "no biases on the linear layers");
  cmd->add_flag("--add-qkv-bias", o->add_qkv_bias,
                "a bias on the QKV projection (Qwen2), also with --disable-bias-linear");
  cmd->add_flag("--qk-layernorm", o->qk_layernorm,
                "RMSNorm on each query and key head before RoPE, one weight per q and k (Qwen3; needs "
                "--normalization RMSNorm)");
  cmd->add_option("--window-size", o->window_size,
                  "sliding-window attention, Megatron's LEFT,RIGHT: a token sees the LEFT before it (Mistral's "
                  "sliding_window - 1); RIGHT must be 0, -1 unbounded (default: full attention)");
  cmd->add_flag("--untie-embeddings-and-output-weights", o->untie, "a separate output layer, not the embedding's");
  from_preset(
      cmd->add_option("--hidden-dropout", o->hidden_dropout, "dropout after attention and MLP")->check(finite_float()));
  from_preset(
      cmd->add_option("--attention-dropout", o->attention_dropout, "only 0 is implemented")->check(finite_float()));
  from_preset(cmd->add_option("--init-method-std", o->init_method_std, "std of the weights' normal init")
                  ->check(finite_float()));

  cmd->option_defaults()->group("Data and tokenizer");
  cmd->add_option("--data-path", o->data_path, "[weight] prefix ... of indexed datasets (troupe preprocess)");
  cmd->add_option("--split", o->split, "train,valid,test weights of the documents");
  cmd->add_option("--data-cache-path", o->data_cache_path,
                  "where the sample indices are cached (default: next to the data)");
  cmd->add_flag("--mock-data", o->mock_data, "random tokens (needs --vocab-size or a tokenizer)");
  cmd->add_flag("--eod-mask-loss", o->eod_mask_loss, "no loss on the EOD tokens");
  add_tokenizer_flags(cmd, o->tokenizer);
  cmd->get_option("--vocab-size")->check(non_negative);  // 0: from the tokenizer

  cmd->option_defaults()->group("Parallelism and devices");
  cmd->add_option("--tensor-model-parallel-size", o->tensor_size, "TP: devices each layer is split over")
      ->check(positive);
  cmd->add_option("--pipeline-model-parallel-size", o->pipeline_size, "PP: pipeline stages")->check(positive);
  cmd->add_option("--context-parallel-size", o->context_size,
                  "CP: devices each sequence is split over (ring attention)")
      ->check(positive);
  cmd->add_option("--cp-comm-type", o->cp_comm_type, "context parallelism's communication: only p2p (the ring)");
  cmd->add_option("--num-layers-per-virtual-pipeline-stage", o->layers_per_virtual_stage,
                  "interleaved 1F1B: layers per model chunk (0: not interleaved)")
      ->check(non_negative);
  cmd->add_option("--num-virtual-stages-per-pipeline-rank", o->virtual_stages_per_rank,
                  "interleaved 1F1B: model chunks per stage (0: not interleaved)")
      ->check(non_negative);
  cmd->add_option("--decoder-first-pipeline-num-layers", o->pipeline_split.first_stage_layers,
                  "uneven split: layers of the first stage (the rest even over the middle stages)");
  cmd->add_option("--decoder-last-pipeline-num-layers", o->pipeline_split.last_stage_layers,
                  "uneven split: layers of the last stage (the rest even over the middle stages)");
  cmd->add_flag("--account-for-embedding-in-pipeline-split", o->pipeline_split.account_for_embedding,
                "count the embedding as a layer of the first stage when splitting the layers");
  cmd->add_flag("--account-for-loss-in-pipeline-split", o->pipeline_split.account_for_loss,
                "count the LM head and loss as a layer of the last stage when splitting the layers");
  cmd->add_option("--microbatch-group-size-per-vp-stage", o->group_size,
                  "interleaved 1F1B: microbatches per group (0: the pipeline size)")
      ->check(non_negative);
  cmd->add_option("--pipeline-schedule", o->schedule,
                  "1f1b, gpipe, zb-h1 or zb-v (zero bubble: backward split into input and weight gradients; "
                  "zb-v: two chunks per stage in a V; not a Megatron flag)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "zb-h1", "zb-v"}));
  cmd->add_option("--device", o->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--devices,--cpu-devices", o->devices,
                  "devices of each process (GPUs or CPU devices); data-parallel size = processes x devices / "
                  "(TP x CP x PP); 0: TP x CP x PP / processes")
      ->check(non_negative);
  cmd->add_flag("--sequence-parallel", o->sequence_parallel,
                "shard norms/dropout/residuals along the sequence (TP > 1)");
  cmd->add_flag("--use-distributed-optimizer", o->distributed_optimizer,
                "shard fp32 master weights and Adam moments over the data-parallel ranks (ZeRO-1)");
  cmd->add_flag("--overlap-grad-reduce", o->overlap_grad_reduce,
                "reduce each gradient bucket during backward, as soon as the last microbatch has written it");
  cmd->add_option("--ddp-bucket-size", o->ddp_bucket_size, "elements per gradient bucket")->check(positive);
  cmd->add_option("--op-timeout", o->op_timeout_s, "seconds a stage may stay silent before the run fails")
      ->check(positive_finite_float());
  cmd->add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                  "seconds another process of a multi-process run may stay silent (stopped, wedged) before the run "
                  "fails; at least 1 (the processes ping each other every 0.5 s)")
      ->check(positive_finite_float() & CLI::Range(1.0, 86400.0));

  cmd->option_defaults()->group("Activation recompute (docs/train.md#activation-recompute)");
  cmd->add_flag("--recompute-activations", o->recompute.recompute_activations,
                "selective recompute (--recompute-granularity selective)");
  cmd->add_option("--recompute-granularity", o->recompute.granularity,
                  "full: whole layers from their inputs; selective: the --recompute-modules of every layer")
      ->check(CLI::IsMember({"full", "selective"}));
  cmd->add_option("--recompute-method", o->recompute.method,
                  "full: uniform (groups of --recompute-num-layers layers, each recomputed from its input) or block "
                  "(the first --recompute-num-layers layers of each pipeline chunk)")
      ->check(CLI::IsMember({"uniform", "block"}));
  cmd->add_option("--recompute-num-layers", o->recompute.num_layers,
                  "full: layers per group (uniform) or per pipeline chunk (block)")
      ->check(positive)
      ->default_str("");
  cmd->add_option("--recompute-modules", o->recompute.modules,
                  "selective: core_attn (default), layernorm, mlp; one or more")
      ->default_str("");

  cmd->option_defaults()->group("Training and optimizer");
  cmd->add_option("--micro-batch-size", o->micro_batch_size, "samples per microbatch")->check(positive);
  cmd->add_option("--global-batch-size", o->global_batch_size, "samples per iteration (0: the micro batch size)")
      ->check(non_negative);
  auto* iters = cmd->add_option("--train-iters", o->train_iters, "iterations to train")->check(non_negative);
  cmd->add_option("--train-samples", o->train_samples,
                  "samples to train instead of --train-iters: iterations = samples / global batch; the schedule "
                  "then counts samples (--lr-*-samples)")
      ->check(positive)
      ->excludes(iters)
      ->default_str("");
  cmd->add_option("--lr", o->lr, "peak learning rate")->check(finite_float());
  cmd->add_option("--min-lr", o->min_lr, "learning rate at the end of the decay")->check(finite_float());
  cmd->add_option("--lr-decay-style", o->lr_decay_style, "constant, linear, cosine, inverse-square-root or WSD")
      ->check(CLI::IsMember({"constant", "linear", "cosine", "inverse-square-root", "WSD"}));
  cmd->add_option("--lr-warmup-iters", o->lr_warmup_iters, "linear warmup iterations")->check(non_negative);
  cmd->add_option("--lr-warmup-samples", o->lr_warmup_samples, "linear warmup samples (with --train-samples)")
      ->check(non_negative);
  cmd->add_option("--lr-warmup-fraction", o->lr_warmup_fraction,
                  "warmup as a fraction of the decay length, instead of --lr-warmup-iters/samples")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--lr-warmup-init", o->lr_warmup_init, "learning rate the warmup starts from")->check(finite_float());
  cmd->add_option("--lr-decay-iters", o->lr_decay_iters, "iterations of the decay (0: --train-iters)")
      ->check(non_negative);
  cmd->add_option("--lr-decay-samples", o->lr_decay_samples, "samples of the decay (0: --train-samples)")
      ->check(non_negative);
  cmd->add_option("--lr-wsd-decay-style", o->lr_wsd_decay_style,
                  "WSD's final anneal: exponential, linear, cosine or minus_sqrt")
      ->check(CLI::IsMember({"exponential", "linear", "cosine", "minus_sqrt"}));
  cmd->add_option("--lr-wsd-decay-iters", o->lr_wsd_decay_iters,
                  "WSD: iterations of the final anneal, which ends at the decay's end")
      ->check(non_negative);
  cmd->add_option("--lr-wsd-decay-samples", o->lr_wsd_decay_samples, "WSD: samples of the final anneal")
      ->check(non_negative);
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay (not on biases and norms)")
      ->check(finite_float());
  cmd->add_option("--clip-grad", o->clip_grad, "global gradient-norm clip (0: none)")->check(finite_float());
  cmd->add_option("--adam-beta1", o->adam_beta1, "Adam beta1")->check(finite_float());
  cmd->add_option("--adam-beta2", o->adam_beta2, "Adam beta2")->check(finite_float());
  cmd->add_option("--adam-eps", o->adam_eps, "Adam epsilon")->check(positive_finite_float());
  cmd->add_flag("--bf16", o->bf16, "bf16 compute on GPUs (the GPU default)");
  cmd->add_flag("--fp16", o->fp16, "fp16 compute with dynamic loss scaling");
  cmd->add_option("--loss-scale", o->loss_scale, "constant loss scale for --fp16 (0: dynamic)")->check(finite_float());
  cmd->add_flag(
      "--check-for-nan-in-loss-and-grad,!--no-check-for-nan-in-loss-and-grad", o->check_for_nan,
      "stop with an error at an inf/NaN loss or gradient norm (default on; with --fp16 an inf/NaN gradient only "
      "skips the step); off: such iterations are skipped");
  cmd->add_option("--max-consecutive-skipped-iterations", o->max_consecutive_skipped,
                  "stop with an error once this many iterations in a row were skipped for inf/NaN gradients "
                  "(0: no bound)")
      ->check(non_negative);
  cmd->add_option("--seed", o->seed, "seed of the weights, dropout and data order");
  cmd->add_flag("--deterministic-mode", o->deterministic_mode,
                "GPU runs that repeat to the bit: cuDNN's deterministic attention backward (apps/train/"
                "deterministic_mode.hpp); CPU runs are deterministic anyway");
  cmd->add_option("--eval-interval", o->eval_interval, "iterations between validations (0: only at the end)")
      ->check(non_negative);
  cmd->add_option("--eval-iters", o->eval_iters, "validation iterations (0: no validation)")->check(non_negative);
  cmd->add_option("--exit-interval", o->exit_interval,
                  "exit when the iteration is a multiple of this, saving first with --save (0: never)")
      ->check(non_negative);
  cmd->add_option("--exit-duration-in-mins", o->exit_duration_mins,
                  "exit after this many minutes of training, saving first with --save (0: never)")
      ->check(non_negative_finite_float());

  cmd->option_defaults()->group("Checkpointing");
  cmd->add_option("--save", o->save, "checkpoint directory to save to (at --save-interval and at the end)");
  cmd->add_option("--save-interval", o->save_interval, "iterations between checkpoints (0: only at the end)")
      ->check(non_negative);
  cmd->add_option("--load", o->load, "resume from the latest checkpoint in this directory");
  add_train_checkpoint_flags(cmd, o->ckpt_step, o->overwrite);  // --ckpt-step, --overwrite
  cmd->get_option("--ckpt-step")->check(non_negative);
  cmd->add_flag("--no-save-optim", o->no_save_optim, "save weights only, not the Adam moments");
  cmd->add_flag("--no-load-optim", o->no_load_optim, "load weights only: fresh Adam moments");
  cmd->add_flag("--no-load-rng", o->no_load_rng, "dropout streams from this run's --seed, not the checkpoint's");
  cmd->add_flag("--finetune", o->finetune,
                "load the weights only and start from iteration 0 (no optimizer state, RNG or data position)");
  cmd->add_flag("--async-save", o->async_save,
                "write checkpoints in the background (a snapshot stalls training; the writer actor does the rest)");
  cmd->add_option("--most-recent-k", o->most_recent_k, "keep only the newest K checkpoints in --save (0: keep all)")
      ->check(non_negative);
  cmd->add_option("--auto-restart", o->auto_restart,
                  "run the training as a child process and restart it up to N times when it fails, from the newest "
                  "intact checkpoint of this run in --save (docs/train.md#supervised-restarts)")
      ->check(non_negative)
      ->needs(cmd->get_option("--save"))
      ->default_str("");

  cmd->option_defaults()->group("Logging and monitoring");
  cmd->add_option("--log-interval", o->log_interval, "iterations between log lines")->check(positive);
  cmd->add_option("--trace", o->trace,
                  "record every op of every actor to this msgpack file (see troupe replay; under mpirun one file per "
                  "process, FILE.rankR)");
  add_monitor_flags(cmd, o->monitor);
  cmd->get_option("--metrics-port")->check(CLI::Range(-1, 65535));  // -1: off, 0: a free port
  cmd->add_option("--peak-tflops", o->peak_tflops, "peak TFLOP/s per device, for MFU in the monitor (0: unknown)")
      ->check(non_negative_finite_float());
  cmd->add_option("--straggler-factor", o->straggler_factor,
                  "name a device whose busy time per iteration is over this times its stage peers' median (0: off)")
      ->check(non_negative_finite_float());
  cmd->add_option("--tensorboard-dir", o->tensorboard_dir,
                  "write Megatron's TensorBoard scalars to an event file here");
  cmd->add_option("--sample-tokens", o->sample_tokens, "generate this many tokens after training (0: none)")
      ->check(non_negative);
  cmd->add_option("--prompt", o->prompt, "prompt for the sample");

  add_moe_flags(cmd, o->moe);
  add_fp8_flags(cmd, o->fp8);
  add_megatron_compat_flags(cmd, o->megatron);
  static bool list_megatron_flags = false;  // prints docs/megatron-flags.md and exits
  cmd->add_flag("--list-megatron-flags", list_megatron_flags,
                "print the table of accepted Megatron flags (docs/megatron-flags.md) and exit")
      ->group("Megatron compatibility (docs/megatron-flags.md)");
  cmd->callback([&run, o, cmd] {
    if (list_megatron_flags) {
      run = [] {
        std::printf("%s", megatron_flags_markdown().c_str());
        return 0;
      };
      return;
    }
    if (o->auto_restart) {
      run = [o, cmd] {
        return supervise_training(
            *cmd, {.max_restarts = *o->auto_restart, .save = o->save, .no_save_optim = o->no_save_optim});
      };
      return;
    }
    run = [o] { return train(*o); };
  });
}

}  // namespace troupe::apps
