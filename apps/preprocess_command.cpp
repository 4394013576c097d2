// `troupe preprocess`: JSON lines -> Megatron indexed datasets (data/preprocess.hpp), with
// Megatron's tools/preprocess_data.py flags, a progress bar on a terminal and plain periodic
// lines otherwise.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "apps/commands.hpp"
#include "apps/common/tokenizer_flags.hpp"
#include "base/log.hpp"
#include "data/preprocess.hpp"

namespace troupe::apps {
namespace {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// Progress on stderr: a bar redrawn in place on a terminal, a plain line every `interval`
// seconds otherwise (logs, CI).
class ProgressReporter {
 public:
  ProgressReporter(bool terminal, double interval) : terminal_(terminal), interval_(interval) {}

  void update(const PreprocessProgress& p) {
    if (p.seconds - last_ < (terminal_ ? 0.1 : interval_)) return;
    last_ = p.seconds;
    const double docs_per_s = p.documents / std::max(p.seconds, 1e-9);
    const double mb_per_s = p.bytes_done / 1e6 / std::max(p.seconds, 1e-9);
    const double fraction = p.bytes_total > 0 ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    const double eta =
        p.bytes_done > 0 ? p.seconds * (double(p.bytes_total - p.bytes_done) / double(p.bytes_done)) : -1;
    if (terminal_) {
      constexpr int kWidth = 30;
      const int filled = int(fraction * kWidth);
      std::string bar(size_t(filled), '#');
      bar.append(size_t(kWidth - filled), '-');
      std::fprintf(stderr, "\r[%s] %5.1f%%  %lld docs  %.0f docs/s  %.1f MB/s  ETA %s   ", bar.c_str(), 100 * fraction,
                   static_cast<long long>(p.documents), docs_per_s, mb_per_s, format_duration(eta).c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "preprocess: %lld documents, %.1f%% of the input, %.0f docs/s, %.1f MB/s, ETA %s\n",
                   static_cast<long long>(p.documents), 100 * fraction, docs_per_s, mb_per_s,
                   format_duration(eta).c_str());
    }
    std::fflush(stderr);
  }

  void finish() {
    if (drawn_) std::fputc('\n', stderr);
  }

 private:
  bool terminal_;
  double interval_;
  double last_ = 0;
  bool drawn_ = false;
};

struct PreprocessFlags {
  PreprocessOptions options;
  bool endoftext_as_text = false;
  bool quiet = false;
  double log_interval = 10;
};

int run_preprocess(PreprocessFlags& flags) {
  PreprocessOptions& opt = flags.options;
  if (flags.endoftext_as_text) opt.tokenizer.special_tokens = SpecialTokens::as_text;
  ProgressReporter progress(::isatty(STDERR_FILENO) == 1, flags.log_interval);
  std::function<void(const PreprocessProgress&)> on_progress;
  if (!flags.quiet) on_progress = [&](const PreprocessProgress& p) { progress.update(p); };
  PreprocessResult r;
  try {
    r = preprocess_jsonl(opt, on_progress);
  } catch (...) {
    progress.finish();
    throw;
  }
  progress.finish();

  for (const PreprocessOutput& o : r.outputs)
    std::printf("%s.{bin,idx}: %lld documents, %lld sequences, %lld tokens (%s)\n", o.path_prefix.c_str(),
                static_cast<long long>(o.documents), static_cast<long long>(o.sequences),
                static_cast<long long>(o.tokens), token_dtype_name(o.dtype));
  std::printf("%lld documents, %.1f MB in %.2f s: %.0f docs/s, %.1f MB/s (%d workers)\n",
              static_cast<long long>(r.documents), r.input_bytes / 1e6, r.seconds,
              r.documents / std::max(r.seconds, 1e-9), r.input_bytes / 1e6 / std::max(r.seconds, 1e-9), opt.workers);
  if (r.blank_lines > 0) std::printf("%lld blank lines ignored\n", static_cast<long long>(r.blank_lines));
  if (r.skipped_lines > 0) {
    std::string first;
    for (const std::string& e : r.skipped_examples) first += "\n  " + e;
    logger("preprocess").warning("skipped ", r.skipped_lines, " bad lines, the first:", first);
  }
  return 0;
}

}  // namespace

void add_preprocess_command(CLI::App& app, CommandRunner& run) {
  auto flags = std::make_shared<PreprocessFlags>();
  PreprocessOptions& o = flags->options;
  o.workers = int(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App* cmd =
      app.add_subcommand("preprocess",
                         "Tokenize JSON lines into Megatron indexed datasets ({prefix}_{key}_document.bin/.idx), "
                         "as Megatron-LM's tools/preprocess_data.py");
  cmd->add_option("--input", o.input, "JSON-lines file, one document per line")->required();
  cmd->add_option("--json-keys", o.json_keys, "Keys to tokenize, one output dataset each")
      ->default_str("text")
      ->expected(1, -1);
  cmd->add_option("--output-prefix", o.output_prefix, "Output path prefix (without _{key}_document)")->required();
  add_tokenizer_flags(cmd, o.tokenizer);
  cmd->add_flag("--append-eod", o.append_eod,
                "End every non-empty document with the EOD id (an HF tokenizer's eos_token)");
  cmd->add_option("--workers", o.workers, "Tokenizing threads (output is the same for any count)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag(
      "--skip-bad-lines", o.skip_bad_lines,
      "Skip and count malformed lines (bad JSON, missing key, wrong type, invalid UTF-8) instead of stopping");
  cmd->add_flag(
      "--endoftext-as-text", flags->endoftext_as_text,
      "Encode \"<|endoftext|>\" in the text as ordinary text (Megatron-LM before 2026) instead of the EOD id");
  cmd->add_option("--log-interval", flags->log_interval, "Seconds between progress lines when stderr is not a terminal")
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet, "No progress output");
  cmd->callback([&run, flags] { run = [flags] { return run_preprocess(*flags); }; });
}

}  // namespace troupe::apps
