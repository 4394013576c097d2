// `troupe generate`: text from a Troupe checkpoint (--load) or an HF folder (--hf) with the
// inference engine (continuous batching over a paged KV cache), streamed to stdout.
//
//   troupe generate --hf gpt2 --prompt "Hello, my name is" --max-tokens 32 --temperature 0
//   troupe generate --load ckpt --prompts-file prompts.txt --top-p 0.9 --seed 7 --logprobs
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "apps/commands.hpp"
#include "apps/generate_load.hpp"
#include "apps/generate_stream.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "kernels/check.hpp"
#include "model/inference_engine.hpp"

namespace troupe::apps {

namespace {

struct GenerateOptions {
  std::string load, hf, vocab_file, merge_file, prompts_file, device = "auto", dtype = "bf16";
  std::vector<std::string> prompts, stop;
  int64_t max_tokens = 64;
  float temperature = 1.0f, top_p = 0.0f;
  int top_k = 0;
  uint64_t seed = 1234;
  bool logprobs = false, print_ids = false, ignore_eod = false;
  int64_t max_requests = 64, max_batch_tokens = 2048, max_seq_length = 0;
  int block_size = 16;
  double kv_cache_gb = 2.0;
};

std::vector<std::string> read_prompts(const GenerateOptions& o) {
  std::vector<std::string> prompts = o.prompts;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    TROUPE_CHECK(in.good(), "--prompts-file ", o.prompts_file, ": cannot open it");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  TROUPE_CHECK(!prompts.empty(), "no prompt: pass --prompt TEXT (repeatable) or --prompts-file FILE (one per line)");
  return prompts;
}

std::unique_ptr<Tokenizer> tokenizer_for(const GenerateOptions& o, const LoadedModel& m) {
  TROUPE_CHECK(o.vocab_file.empty() == o.merge_file.empty(), "--vocab-file and --merge-file go together");
  const std::string vocab = o.vocab_file.empty() ? m.vocab_file : o.vocab_file;
  const std::string merges = o.merge_file.empty() ? m.merge_file : o.merge_file;
  TROUPE_CHECK(!vocab.empty(), "no tokenizer: ", o.hf.empty() ? "--load " + o.load : "--hf " + o.hf,
               " has no vocab.json and merges.txt; pass --vocab-file and --merge-file");
  auto tok = std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_files(vocab, merges));
  TROUPE_CHECK(tok->vocab_size() <= m.config.vocab_size, "the tokenizer (", vocab, ") has ", tok->vocab_size(),
               " ids, the model only ", m.config.vocab_size);
  return tok;
}

int generate(const GenerateOptions& o) {
  TROUPE_CHECK(o.load.empty() != o.hf.empty(), "pass exactly one of --load DIR (a Troupe checkpoint) and --hf DIR");
  const std::vector<std::string> prompts = read_prompts(o);

  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.seed = o.seed;
  sp.max_tokens = o.max_tokens;
  sp.stop_strings = o.stop;
  sp.logprobs = o.logprobs;
  sp.validate();  // before the (slow) load

  const bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  const LoadedModel m = o.hf.empty() ? load_checkpoint_model(o.load) : load_hf_model(o.hf);
  const std::unique_ptr<Tokenizer> tok = tokenizer_for(o, m);
  if (!o.ignore_eod) sp.stop_tokens = {tok->eod()};

  std::vector<std::vector<int32_t>> ids;
  int64_t longest = 0, reserve_blocks = 0;
  const int64_t max_len = o.max_seq_length > 0 ? o.max_seq_length : m.config.max_positions();
  for (const std::string& p : prompts) {
    ids.push_back(tok->encode(p));
    TROUPE_CHECK(!ids.back().empty(), "an empty prompt cannot be continued (the model needs one token at least)");
    longest = std::max<int64_t>(longest, int64_t(ids.back().size()));
    reserve_blocks += (std::min(int64_t(ids.back().size()) + o.max_tokens, max_len) + o.block_size - 1) / o.block_size;
  }

  const Context ctx = cuda ? Context::cuda(0) : Context::cpu();
  const DType compute = cuda ? dtype_from_name(o.dtype) : DType::f32;
  const int64_t batch_tokens = std::max(o.max_batch_tokens, longest);
  InferenceModel model(ctx, m.config, compute,
                       {.max_tokens = batch_tokens, .max_sequences = std::min(o.max_requests, batch_tokens)});
  model.load_weights(m.weights);
  // Blocks for every request at once, within the memory budget.
  const int64_t budget = KvCache::blocks_in_bytes(m.config, compute, o.block_size, size_t(o.kv_cache_gb * (1 << 30)));
  EngineOptions eo{.num_blocks = std::max<int64_t>(1, std::min(reserve_blocks, budget)),
                   .block_size = o.block_size,
                   .max_sequence_length = max_len};
  InferenceEngine engine(model, eo, [&](std::span<const int32_t> t) { return tok->decode(t); });

  OrderedStream out(stdout, *tok, prompts, o.stop, {.logprobs = o.logprobs, .ids = o.print_ids});
  for (size_t i = 0; i < ids.size(); ++i)
    engine.add_request({ids[i], sp}, [&out, i](const TokenEvent& e) { out.on_event(i, e); });
  const auto start = std::chrono::steady_clock::now();
  engine.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "generated %lld tokens for %zu prompts in %.2f s (%.1f tokens/s) on %s\n",
               (long long)out.generated_tokens(), prompts.size(), secs, double(out.generated_tokens()) / secs,
               cuda ? "cuda" : "cpu");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandRunner& run) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a checkpoint or an HF folder (streams to stdout)");
  cmd->add_option("--load", o->load, "Troupe checkpoint directory (its newest checkpoint)");
  cmd->add_option("--hf", o->hf, "Hugging Face folder: config.json + model.safetensors (GPT-2 or Llama)");
  cmd->add_option("--prompt", o->prompts, "prompt text (repeatable)");
  cmd->add_option("--prompts-file", o->prompts_file, "file of prompts, one per line");
  cmd->add_option("--max-tokens,--tokens-to-generate", o->max_tokens, "tokens to generate per prompt at most");
  cmd->add_option("--temperature", o->temperature, "0: greedy");
  cmd->add_option("--top-k", o->top_k, "sample from the k most likely tokens (0: off, 1: greedy)");
  cmd->add_option("--top-p", o->top_p, "nucleus sampling (0: off; not with --top-k)");
  cmd->add_option("--seed", o->seed, "sampling seed (each prompt draws from its own generator)");
  cmd->add_option("--stop", o->stop, "stop when the text contains this string (repeatable; not printed)");
  cmd->add_flag("--ignore-eod", o->ignore_eod, "do not stop at the tokenizer's end-of-document token");
  cmd->add_flag("--logprobs", o->logprobs, "print the log-probability of each generated token");
  cmd->add_flag("--print-ids", o->print_ids, "print the generated token ids after each completion");
  cmd->add_option("--vocab-file", o->vocab_file, "GPT-2 vocab.json (default: the one beside the weights)");
  cmd->add_option("--merge-file", o->merge_file, "GPT-2 merges.txt (default: the one beside the weights)");
  cmd->add_option("--device", o->device, "cpu, cuda, or auto (cuda when a GPU is visible)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--dtype", o->dtype, "CUDA compute dtype")->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--inference-max-requests", o->max_requests, "requests decoded together at most");
  cmd->add_option("--inference-max-batch-tokens", o->max_batch_tokens, "tokens per forward step at most");
  cmd->add_option("--inference-max-seq-length", o->max_seq_length, "prompt + generated tokens at most (default: the model's positions)");
  cmd->add_option("--kv-block-size", o->block_size, "tokens per KV-cache block");
  cmd->add_option("--kv-cache-gb", o->kv_cache_gb, "KV-cache memory at most, GiB");
  cmd->callback([&run, o] { run = [o] { return generate(*o); }; });
}

}  // namespace troupe::apps
