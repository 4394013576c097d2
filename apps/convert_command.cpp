// `troupe convert`: Troupe checkpoints to and from Hugging Face folders.
//   troupe convert --to hf --load CKPT --output HF_DIR [--dtype bf16]   latest checkpoint -> config.json + safetensors
//   troupe convert --from hf --input HF_DIR --save CKPT   HF GPT-2 / Llama / Mixtral / Qwen-MoE -> iteration 0
// Checkpoints hold global tensors, so any checkpoint converts whatever layout saved it, and a
// converted one loads into any layout (`troupe train --load CKPT --finetune`). The tokenizer and
// generation files (tokenizer.json, tokenizer_config.json, generation_config.json, vocab.json,
// merges.txt) travel along where they exist. One line per tensor tells how far a long
// conversion is ("[12/291] model.layers.1.mlp.up_proj.weight").
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/train/checkpoint_shards.hpp"
#include "apps/commands.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/tokenizer_flags.hpp"
#include "base/check.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/hf/hf_tensor_files.hpp"
#include "storage/atomic_file.hpp"
#include "storage/checkpoint_reader.hpp"

namespace troupe::apps {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string to, from;              // "hf"
  std::string load, input;           // sources: a Troupe checkpoint root / an HF folder
  std::optional<int64_t> ckpt_step;  // --to hf: the iteration of --load (default: the tracker's)
  std::string output, save;          // destinations: an HF folder / a Troupe checkpoint root
  std::string dtype;                 // --to hf: of the written tensors ("" = f32)
};

// One line per tensor, flushed, so that a conversion of a large model is not silent.
void print_progress(size_t done, size_t total, const std::string& name) {
  std::printf("  [%zu/%zu] %s\n", done, total, name.c_str());
  std::fflush(stdout);
}

int to_hf(const ConvertOptions& o) {
  TROUPE_CHECK(!o.load.empty() && !o.output.empty(), "convert --to hf needs --load CHECKPOINT_DIR and --output HF_DIR");
  for (const char* f : {"config.json", kHfSafetensorsName, kHfSafetensorsIndexName})
    TROUPE_CHECK(!fs::exists(fs::path(o.output) / f), "'", o.output, "' already holds a ", f,
                 "; refusing to overwrite it (give another --output)");
  // A Troupe checkpoint holds f32 master weights and records no training dtype: f32 unless asked.
  const DType dtype = o.dtype.empty() ? DType::f32 : dtype_from_name(o.dtype);
  const CheckpointReader r = CheckpointReader::open(o.load, o.ckpt_step);
  const GptConfig config = gpt_config_from_json(r.metadata().model_config);
  const ParamLayout layout(config, ChunkSpec::whole_model());
  std::printf("converting %s (iteration %ld, %.2fM parameters) to a Hugging Face %s folder in %s (%s)\n",
              r.dir().c_str(), long(r.iteration()), double(config.num_parameters()) / 1e6,
              hf_arch_name(hf_arch_for(config)), o.output.c_str(), dtype_name(dtype));
  std::printf("  reading the checkpoint's parameters\n");
  std::fflush(stdout);
  const Tensor params = actors::read_checkpoint_params(r, layout);
  fs::create_directories(o.output);
  save_hf_checkpoint(o.output, layout, hf_arch_for(config), params, {.dtype = dtype, .progress = print_progress});
  for (const auto& [from, name] : tokenizer_files_in(r.dir()))
    copy_file_atomic(from, (fs::path(o.output) / name).string());
  std::printf("  wrote %s/config.json and %s\n", o.output.c_str(),
              fs::exists(fs::path(o.output) / kHfSafetensorsIndexName) ? "the shards of model.safetensors.index.json"
                                                                       : kHfSafetensorsName);
  return 0;
}

int from_hf(const ConvertOptions& o) {
  TROUPE_CHECK(!o.input.empty() && !o.save.empty(), "convert --from hf needs --input HF_DIR and --save CHECKPOINT_DIR");
  TROUPE_CHECK(o.dtype.empty(), "--dtype is for --to hf: a Troupe checkpoint holds f32 weights");
  const HfCheckpoint hf = read_hf_checkpoint(o.input);  // refuses pytorch_model.bin before anything is printed
  const ParamLayout layout(hf.config, ChunkSpec::whole_model());
  std::printf("converting the Hugging Face %s model in %s (%.2fM parameters) to a Troupe checkpoint in %s\n",
              hf_arch_name(hf.arch), o.input.c_str(), double(hf.config.num_parameters()) / 1e6, o.save.c_str());
  const Tensor params = load_hf_weights(o.input, layout, hf.arch, print_progress);
  const std::string dir = actors::write_params_checkpoint(o.save, layout, params, tokenizer_files_in(o.input));
  std::printf("  wrote %s (weights only: train from it with --load %s --finetune)\n", dir.c_str(), o.save.c_str());
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, CommandRunner& run) {
  auto* cmd = app.add_subcommand("convert", "convert checkpoints to and from Hugging Face folders");
  auto o = std::make_shared<ConvertOptions>();
  cmd->add_option("--to", o->to, "export format")->check(CLI::IsMember({"hf"}));
  cmd->add_option("--from", o->from, "import format")->check(CLI::IsMember({"hf"}));
  cmd->add_option("--load", o->load, "--to: the Troupe checkpoint directory (its latest checkpoint)");
  add_ckpt_step_flag(cmd, o->ckpt_step);
  cmd->add_option("--output", o->output, "--to: the Hugging Face folder to write");
  cmd->add_option("--input", o->input, "--from: the Hugging Face folder (config.json + safetensors)");
  cmd->add_option("--save", o->save, "--from: the Troupe checkpoint directory to write");
  cmd->add_option("--dtype", o->dtype, "--to: dtype of the written tensors (default f32; rounded to nearest even)")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->callback([&run, o] {
    run = [o] {
      TROUPE_CHECK(o->to.empty() != o->from.empty(), "troupe convert: give exactly one of --to hf or --from hf");
      return o->to.empty() ? from_hf(*o) : to_hf(*o);
    };
  });
}

}  // namespace troupe::apps
