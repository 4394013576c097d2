// `troupe generate`: text from a Troupe checkpoint (--load) or an HF folder (--hf) with the
// inference engine (continuous batching over a paged KV cache), streamed to stdout.
//
//   troupe generate --hf gpt2 --prompt "Hello, my name is" --max-tokens 32 --temperature 0
//   troupe generate --load ckpt --prompts-file prompts.txt --top-p 0.9 --seed 7 --logprobs
//   troupe generate --hf llama3-dir --chat --system "Be brief." --temperature 0.7
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "apps/commands.hpp"
#include "apps/generate/chat_session.hpp"
#include "apps/generate/generate_stream.hpp"
#include "apps/common/count_flags.hpp"
#include "apps/common/float_flags.hpp"
#include "apps/common/inference_flags.hpp"
#include "base/check.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::apps {

namespace {

struct GenerateOptions {
  InferenceFlags model;
  std::string prompts_file;
  std::vector<std::string> prompts, stop;
  int64_t max_tokens = 64;
  float temperature = 1.0f, top_p = 0.0f;
  int top_k = 0;
  uint64_t seed = 1234;
  bool logprobs = false, print_ids = false, ignore_eod = false;
  bool chat = false;   // --chat: a conversation in the terminal
  std::string system;  // --system: its system message
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

// --chat: user lines from stdin, the assistant's answers streamed to stdout.
int chat(const GenerateOptions& o, SamplingParams sp) {
  TROUPE_CHECK(o.prompts.empty() && o.prompts_file.empty(),
               "--chat reads the conversation from standard input; "
               "--prompt and --prompts-file do not go with it");
  TROUPE_CHECK(!o.logprobs && !o.print_ids, "--logprobs and --print-ids do not go with --chat");
  const InferenceSetup s = load_inference_setup(o.model);
  TROUPE_CHECK(s.chat != nullptr,
               "--chat: the model has no chat template (no chat_template in its "
               "tokenizer_config.json); pass --chat-template FILE");
  if (!o.ignore_eod) sp.stop_tokens = s.stop_tokens;
  const std::shared_ptr<ReplicaModels> replica =
      make_replica_models(o.model, s, 0, inference_model_options(o.model, s.max_seq_length));
  const Tokenizer& tok = *s.tokenizer;
  InferenceEngine engine(replica->ranks(), engine_options(o.model, s, 0),
                         [&](std::span<const int32_t> t) { return tok.decode_skipping_special(t); });
  ChatSession session(engine, tok, *s.chat, sp, {.system = o.system, .template_variables = nullptr});
  session.run(stdin, stdout);
  return 0;
}

int generate(const GenerateOptions& o) {
  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.seed = o.seed;
  sp.max_tokens = o.max_tokens;
  sp.stop_strings = o.stop;
  sp.logprobs = o.logprobs;
  sp.validate();  // before the (slow) load
  if (o.chat) return chat(o, sp);
  const std::vector<std::string> prompts = read_prompts(o);

  const InferenceSetup s = load_inference_setup(o.model);
  const Tokenizer& tok = *s.tokenizer;
  if (!o.ignore_eod) sp.stop_tokens = s.stop_tokens;
  std::vector<std::vector<int32_t>> ids;
  int64_t longest = 0, reserve_blocks = 0;
  for (const std::string& p : prompts) {
    ids.push_back({});
    tok.encode_with_special_tokens_append(p, ids.back());  // an HF tokenizer's BOS, as HF's generate has
    TROUPE_CHECK(!ids.back().empty(), "an empty prompt cannot be continued (the model needs one token at least)");
    longest = std::max<int64_t>(longest, int64_t(ids.back().size()));
    const int64_t reach = std::min(int64_t(ids.back().size()) + o.max_tokens, s.max_seq_length);
    reserve_blocks += (reach + o.model.block_size - 1) / o.model.block_size;
  }

  const std::shared_ptr<ReplicaModels> replica =
      make_replica_models(o.model, s, 0, inference_model_options(o.model, longest));
  // Blocks for every prompt at once, within the memory budget.
  InferenceEngine engine(replica->ranks(), engine_options(o.model, s, reserve_blocks),
                         [&](std::span<const int32_t> t) { return tok.decode_skipping_special(t); });

  OrderedStream out(stdout, tok, prompts, o.stop, {.logprobs = o.logprobs, .ids = o.print_ids});
  for (size_t i = 0; i < ids.size(); ++i)
    engine.add_request({ids[i], sp}, [&out, i](const TokenEvent& e) { out.on_event(i, e); });
  const auto start = std::chrono::steady_clock::now();
  engine.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "generated %lld tokens for %zu prompts in %.2f s (%.1f tokens/s) on %d %s device%s\n",
               (long long)out.generated_tokens(), prompts.size(), secs, double(out.generated_tokens()) / secs,
               o.model.tensor_parallel, s.cuda ? "cuda" : "cpu", o.model.tensor_parallel > 1 ? "s" : "");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandRunner& run) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a checkpoint or an HF folder (streams to stdout)");
  add_inference_flags(cmd, o->model);
  // One value per --prompt (repeat the flag for several): an unquoted `--prompt Call me Ishmael`
  // is an error about `me`, not three prompts.
  cmd->add_option("--prompt", o->prompts, "prompt text (repeat the flag for several prompts)")->allow_extra_args(false);
  cmd->add_option("--prompts-file", o->prompts_file, "file of prompts, one per line");
  cmd->add_option("--max-tokens,--tokens-to-generate", o->max_tokens, "tokens to generate per prompt at most")
      ->check(non_negative_count());
  cmd->add_option("--temperature", o->temperature, "0: greedy")->check(non_negative_finite_float());
  cmd->add_option("--top-k", o->top_k, "sample from the k most likely tokens (0: off, 1: greedy)")
      ->check(non_negative_count());
  cmd->add_option("--top-p", o->top_p, "nucleus sampling (0: off; not with --top-k)")
      ->check(non_negative_finite_float());
  cmd->add_option("--seed", o->seed, "sampling seed (each prompt draws from its own generator)")
      ->check(non_negative_count());
  cmd->add_option("--stop", o->stop, "stop when the text contains this string (repeatable; not printed)");
  cmd->add_flag("--ignore-eod", o->ignore_eod,
                "do not stop at the tokenizer's end-of-document token or the model's eos_token_id");
  cmd->add_flag("--logprobs", o->logprobs, "print the log-probability of each generated token");
  cmd->add_flag("--print-ids", o->print_ids, "print the generated token ids after each completion");
  cmd->add_flag("--chat", o->chat,
                "a conversation: each line of standard input is a user message, answered with the model's chat "
                "template (an empty line ends it)");
  cmd->add_option("--system", o->system, "--chat: a system message first");
  cmd->callback([&run, o] { run = [o] { return generate(*o); }; });
}

}  // namespace troupe::apps
