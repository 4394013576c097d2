// Runs our model on an HF checkpoint folder and writes what scripts/check_hf_parity.py
// compares against `transformers`: logits, mean loss and every parameter gradient (by HF
// name) for the tokens/targets in an inputs file.
//
//   hf_parity_tool --hf-dir gpt2-tiny --inputs in.safetensors --device cpu --out ours.safetensors
//   hf_parity_tool --checkpoint ckpt ...    (the weights of a Troupe checkpoint instead: export checks)
// inputs: "tokens" i32 [B, T], "targets" i32 [B, T] (-1 = ignored).
// output: "logits" f32 [B, T, V], "loss" f32 [1], "grad.<hf name>" f32 for each parameter.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "actors/train/checkpoint_shards.hpp"
#include "base/check.hpp"
#include "model/gpt_chunk.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/train/trainer.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/safetensors.hpp"

using namespace troupe;

int main(int argc, char** argv) {
  CLI::App app{"Forward/backward of our model on an HF checkpoint, for parity checks"};
  std::string hf_dir, checkpoint, inputs, out, device = "cpu", dtype = "bf16";
  auto* hf = app.add_option("--hf-dir", hf_dir, "HF checkpoint folder (config.json + model.safetensors)");
  app.add_option("--checkpoint", checkpoint, "a Troupe checkpoint directory (its latest checkpoint)")->excludes(hf);
  app.add_option("--inputs", inputs, "safetensors with tokens and targets")->required();
  app.add_option("--out", out, "where to write logits, loss and gradients")->required();
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype, "compute dtype on CUDA (bf16 or f16)")->check(CLI::IsMember({"bf16", "f16"}));
  CLI11_PARSE(app, argc, argv);

  try {
    TROUPE_CHECK(!hf_dir.empty() || !checkpoint.empty(), "give --hf-dir or --checkpoint");
    HfCheckpoint ck;
    if (checkpoint.empty()) {
      ck = read_hf_checkpoint(hf_dir);
    } else {
      ck.config = gpt_config_from_json(CheckpointReader::open(checkpoint).metadata().model_config);
      ck.arch = hf_arch_for(ck.config);
    }
    const Context ctx = device == "cuda" ? Context::cuda(0) : Context::cpu();
    const DType compute = device == "cuda" ? dtype_from_name(dtype) : DType::f32;
    GptChunk chunk(ctx, ck.config, ChunkSpec::whole_model(), compute);
    chunk.load_weights(checkpoint.empty() ? load_hf_weights(hf_dir, chunk.layout(), ck.arch)
                                          : actors::read_checkpoint_params(checkpoint, chunk.layout()));

    const SafetensorsFile in = SafetensorsFile::open(inputs);
    const Tensor tokens = in.read("tokens"), targets = in.read("targets");
    expect_dtype("hf_parity_tool", "tokens", tokens, DType::i32);
    expect_dtype("hf_parity_tool", "targets", targets, DType::i32);
    const int64_t B = tokens.dim(0), T = tokens.dim(1), V = ck.config.vocab_size;
    const int64_t vp = ck.config.padded_vocab_size();

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
    const double loss_sum = sum_losses(losses);
    Tensor loss = Tensor::host_f32({1}, {float(loss_sum / double(counted))});

    std::vector<std::pair<std::string, Tensor>> outputs{{"logits", logits}, {"loss", loss}};
    for (auto& [name, g] : export_hf(chunk.layout(), ck.arch, to_host_f32(ctx, chunk.grads())))
      outputs.emplace_back("grad." + name, g);
    write_safetensors(out, outputs);
    std::printf("loss %.6f over %ld tokens on %s\n", loss.at(0), long(counted), device.c_str());
  } catch (const std::exception& e) {
    std::cerr << "hf_parity_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
