// Runs our model on an HF checkpoint folder and writes what scripts/check_hf_parity.py
// compares against `transformers`: logits, mean loss and every parameter gradient (by HF
// name) for the tokens/targets in an inputs file; optionally the greedy continuation of each
// row's first tokens by the inference model (prefill, then decode steps on the KV cache), and
// the weights exported back to an HF folder.
//
//   hf_parity_tool --hf-dir gpt2-tiny --inputs in.safetensors --device cpu --out ours.safetensors
//   hf_parity_tool ... --generate 8 --prompt-len 16     (greedy: "generated" i32 [B, 8])
//   hf_parity_tool ... --export-dir out-hf               (config.json + model.safetensors of the weights)
//   hf_parity_tool --checkpoint ckpt ...    (the weights of a Troupe checkpoint instead: export checks)
// inputs: "tokens" i32 [B, T], "targets" i32 [B, T] (-1 = ignored).
// output: "logits" f32 [B, T, V], "loss" f32 [1], "grad.<hf name>" f32 for each parameter,
// "generated" i32 [B, N] with --generate N. MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE) name their
// gradients per expert, as save_pretrained names the weights (the router's too: mlp.gate.weight).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "actors/train/checkpoint_shards.hpp"
#include "base/check.hpp"
#include "model/gpt_chunk.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/inference/inference_model.hpp"
#include "model/train/trainer.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/safetensors.hpp"

using namespace troupe;

namespace {

struct ToolOptions {
  std::string hf_dir, checkpoint, inputs, out, export_dir, device = "cpu", dtype = "bf16";
  int64_t generate = 0, prompt_len = 16;
};

// Logits [B, T, V] of an evaluation forward, then the mean loss and the gradients of a training
// forward + backward (HF names), appended to `outputs`.
void forward_backward(GptChunk& chunk, const Tensor& tokens, const Tensor& targets,
                      std::vector<std::pair<std::string, Tensor>>& outputs, HfArch arch, const std::string& device) {
  const Context& ctx = chunk.context();
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = chunk.config().vocab_size;
  const int64_t vp = chunk.config().padded_vocab_size();
  const int64_t counted = count_targets(targets);
  TROUPE_CHECK(counted > 0, "every target is ignored");

  // Logits from an evaluation forward (a training forward overwrites them with dlogits).
  ActivationsPtr eval = chunk.forward(tokens, targets, Tensor(), {.training = false});
  const Tensor logits_padded = to_host_f32(ctx, eval->logits);
  chunk.release(std::move(eval));
  Tensor logits = Tensor::host(DType::f32, {B, T, V});
  for (int64_t r = 0; r < B * T; ++r)
    std::copy_n(logits_padded.data_as<float>() + r * vp, V, logits.data_as<float>() + r * V);

  ActivationsPtr train =
      chunk.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = 1.0f / float(counted)});
  const Tensor losses = to_host_f32(ctx, train->losses);
  chunk.backward(*train, Tensor(), Tensor());
  chunk.release(std::move(train));
  Tensor loss = Tensor::host_f32({1}, {float(sum_losses(losses) / double(counted))});

  outputs.emplace_back("logits", logits);
  outputs.emplace_back("loss", loss);
  for (auto& [name, g] : export_hf(chunk.layout(), arch, to_host_f32(ctx, chunk.grads())))
    outputs.emplace_back("grad." + name, g);
  std::printf("loss %.6f over %ld tokens on %s\n", loss.at(0), long(counted), device.c_str());
}

// The greedy continuation (n tokens) of each row's first `prompt_len` tokens: a prefill, then one
// decode step per token on the paged KV cache. i32 [B, n].
Tensor greedy_generate(const Context& ctx, const GptConfig& config, DType compute, const Tensor& weights,
                       const Tensor& tokens, int64_t prompt_len, int64_t n) {
  const int64_t B = tokens.dim(0), V = config.vocab_size;
  TROUPE_CHECK(prompt_len > 0 && prompt_len <= tokens.dim(1), "--prompt-len ", prompt_len, " outside the ",
               tokens.dim(1), " tokens of a row");
  InferenceModel model(ctx, config, compute, {.max_tokens = std::max<int64_t>(prompt_len, 1), .max_sequences = 1});
  model.load_weights(weights);
  Tensor out = Tensor::host(DType::i32, {B, n});
  for (int64_t b = 0; b < B; ++b) {
    KvCache cache(ctx, config, compute, (prompt_len + n) / 16 + 1, 16);
    std::vector<int32_t> blocks;
    TROUPE_CHECK(cache.allocate(cache.blocks_for(prompt_len + n), blocks), "greedy_generate: KV cache too small");
    std::vector<int32_t> seq(tokens.data_as<int32_t>() + b * tokens.dim(1),
                             tokens.data_as<int32_t>() + b * tokens.dim(1) + prompt_len);
    int64_t cached = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<SequenceInput> batch{
          {std::span(seq).subspan(size_t(cached)), cached, std::span<const int32_t>(blocks)}};
      const Tensor logits = to_host_f32(ctx, model.forward(batch, cache));  // [1, Vp]
      cached = int64_t(seq.size());
      const float* row = logits.data_as<float>();
      seq.push_back(int32_t(std::max_element(row, row + V) - row));
      out.data_as<int32_t>()[b * n + i] = seq.back();
    }
  }
  return out;
}

int run(const ToolOptions& o) {
  TROUPE_CHECK(!o.hf_dir.empty() || !o.checkpoint.empty(), "give --hf-dir or --checkpoint");
  HfCheckpoint ck;
  if (o.checkpoint.empty()) {
    ck = read_hf_checkpoint(o.hf_dir);
  } else {
    ck.config = gpt_config_from_json(CheckpointReader::open(o.checkpoint).metadata().model_config);
    ck.arch = hf_arch_for(ck.config);
  }
  const Context ctx = o.device == "cuda" ? Context::cuda(0) : Context::cpu();
  const DType compute = o.device == "cuda" ? dtype_from_name(o.dtype) : DType::f32;
  GptChunk chunk(ctx, ck.config, ChunkSpec::whole_model(), compute);
  const Tensor weights = o.checkpoint.empty() ? load_hf_weights(o.hf_dir, chunk.layout(), ck.arch)
                                              : actors::read_checkpoint_params(o.checkpoint, chunk.layout());
  chunk.load_weights(weights);

  const SafetensorsFile in = SafetensorsFile::open(o.inputs);
  const Tensor tokens = in.read("tokens"), targets = in.read("targets");
  expect_dtype("hf_parity_tool", "tokens", tokens, DType::i32);
  expect_dtype("hf_parity_tool", "targets", targets, DType::i32);

  std::vector<std::pair<std::string, Tensor>> outputs;
  forward_backward(chunk, tokens, targets, outputs, ck.arch, o.device);
  if (o.generate > 0)
    outputs.emplace_back("generated",
                         greedy_generate(ctx, ck.config, compute, weights, tokens, o.prompt_len, o.generate));
  write_safetensors(o.out, outputs);
  if (!o.export_dir.empty()) {
    save_hf_checkpoint(o.export_dir, chunk.layout(), ck.arch, weights);
    std::printf("exported to %s\n", o.export_dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Forward/backward of our model on an HF checkpoint, for parity checks"};
  ToolOptions o;
  auto* hf = app.add_option("--hf-dir", o.hf_dir, "HF checkpoint folder (config.json + model.safetensors)");
  app.add_option("--checkpoint", o.checkpoint, "a Troupe checkpoint directory (its latest checkpoint)")->excludes(hf);
  app.add_option("--inputs", o.inputs, "safetensors with tokens and targets")->required();
  app.add_option("--out", o.out, "where to write logits, loss and gradients")->required();
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", o.dtype, "compute dtype on CUDA (bf16 or f16)")->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--generate", o.generate, "greedy-generate this many tokens after each row's prompt (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt-len", o.prompt_len, "the prompt: each row's first tokens (--generate)");
  app.add_option("--export-dir", o.export_dir, "also write the weights as an HF folder here (export round trip)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "hf_parity_tool: " << e.what() << "\n";
    return 1;
  }
}
