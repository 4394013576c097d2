// Preprocessing throughput over the bundled corpora (repeated --copies times), as Google
// Benchmark cases (wall time), each for every --threads count:
//   preprocess/threads:N  `troupe preprocess` end to end: JSON parsing, GPT-2 tokenization with
//                         N workers, .bin/.idx writing (input bytes = the JSON lines)
//   tokenize/threads:N    the tokenization alone: texts already in memory, documents shared out
//                         among N threads, one tokenizer clone each, made fresh (empty caches)
//                         before each timed pass (input bytes = the texts)
// Counters: bytes (of input), docs and tokens, per second.
//
// The ratio to HF `tokenizers` comes from scripts/bench_tokenizers_hf.py, which encodes the
// same texts and reads this benchmark's JSON (best of the repetitions, as its own best-of):
//   preprocess_bench --copies 8 --benchmark_repetitions=3 --benchmark_out=preprocess.json
//       --benchmark_out_format=json
//   python3 scripts/bench_tokenizers_hf.py --copies 8 --troupe-json preprocess.json
//
//   preprocess_bench [--copies 8] [--threads 1,16] [--corpora a.jsonl b.jsonl] [--benchmark_* flags]
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "base/check.hpp"
#include "bench/common/bench_main.hpp"
#include "data/preprocess.hpp"

namespace {

using benchmark::Counter;

// The source tree this was built from, or the working directory when that is not here (a
// build carried to another machine, run from the repository root).
std::string source_dir() {
  return std::filesystem::exists(std::string(TROUPE_SOURCE_DIR) + "/assets") ? TROUPE_SOURCE_DIR : ".";
}

troupe::TokenizerOptions gpt2() {
  troupe::TokenizerOptions t;
  t.vocab_file = source_dir() + "/assets/gpt2/gpt2-vocab.json";
  t.merge_file = source_dir() + "/assets/gpt2/gpt2-merges.txt";
  return t;
}

// The input of every case: the corpora `copies` times, as one JSON-lines file in a scratch
// directory (removed with this) and as texts in memory.
struct Input {
  Input(const std::vector<std::string>& corpora, int copies)
      : dir(std::filesystem::temp_directory_path() / ("troupe-preprocess-bench-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
    file = (dir / "input.jsonl").string();
    std::ofstream out(file, std::ios::binary);
    for (int c = 0; c < copies; ++c)
      for (const std::string& path : corpora) {
        std::ifstream in(path, std::ios::binary);
        TROUPE_CHECK(bool(in), "cannot open ", path);
        std::string line;
        while (std::getline(in, line)) {
          if (line.empty()) continue;
          out << line << '\n';
          texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
        }
      }
    out.close();
    file_bytes = int64_t(std::filesystem::file_size(file));
    for (const std::string& t : texts) text_bytes += int64_t(t.size());
  }
  ~Input() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  std::filesystem::path dir;
  std::string file;
  std::vector<std::string> texts;
  int64_t file_bytes = 0, text_bytes = 0;
};

void preprocess(benchmark::State& state, const Input& input) {
  troupe::PreprocessOptions o;
  o.input = input.file;
  o.output_prefix = (input.dir / "out").string();
  o.tokenizer = gpt2();
  o.append_eod = true;
  o.workers = int(state.range(0));
  troupe::PreprocessResult result;
  for (auto _ : state) result = troupe::preprocess_jsonl(o);
  state.counters["bytes"] = Counter(double(input.file_bytes), Counter::kIsIterationInvariantRate);
  state.counters["docs"] = Counter(double(result.documents), Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = Counter(double(result.outputs.at(0).tokens), Counter::kIsIterationInvariantRate);
}

// Encodes every text once with `clones.size()` threads taking the next document from a shared
// counter; returns the token count.
int64_t tokenize_all(const Input& input, const std::vector<std::unique_ptr<troupe::Tokenizer>>& clones) {
  std::atomic<size_t> next{0};
  std::atomic<int64_t> tokens{0};
  auto work = [&](size_t t) {
    std::vector<int32_t> ids;
    int64_t count = 0;
    for (size_t d; (d = next.fetch_add(1)) < input.texts.size();) {
      ids.clear();
      clones[t]->encode_append(input.texts[d], ids);
      count += int64_t(ids.size());
    }
    tokens += count;
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < clones.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  return tokens.load();
}

void tokenize(benchmark::State& state, const Input& input, const troupe::Tokenizer& tok) {
  int64_t tokens = 0;
  std::vector<std::unique_ptr<troupe::Tokenizer>> clones;
  for (auto _ : state) {
    state.PauseTiming();
    clones.clear();
    for (int64_t t = 0; t < state.range(0); ++t) clones.push_back(tok.clone());
    state.ResumeTiming();
    tokens = tokenize_all(input, clones);
  }
  state.counters["bytes"] = Counter(double(input.text_bytes), Counter::kIsIterationInvariantRate);
  state.counters["docs"] = Counter(double(input.texts.size()), Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = Counter(double(tokens), Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Preprocess and tokenizer throughput on the bundled corpora, on Google Benchmark"};
  std::vector<std::string> corpora = {source_dir() + "/assets/corpora/moby-dick.jsonl",
                                      source_dir() + "/assets/corpora/sotu.jsonl"};
  int copies = 8;
  std::vector<int64_t> threads = {1, int64_t(std::max(1u, std::thread::hardware_concurrency()))};
  app.add_option("--corpora", corpora, "JSON-lines files (key \"text\")")->capture_default_str();
  app.add_option("--copies", copies, "Times the corpora are repeated in the input")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--threads", threads, "Thread counts")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return troupe::bench::bench_main(app, argc, argv, "preprocess_bench", [&] {
    const Input input(corpora, copies);
    std::printf("input: %zu documents, %.1f MB of JSON lines, %.1f MB of text (%d copies of %zu corpora)\n",
                input.texts.size(), double(input.file_bytes) / 1e6, double(input.text_bytes) / 1e6, copies,
                corpora.size());
    const std::unique_ptr<troupe::Tokenizer> tok = troupe::build_tokenizer(gpt2());
    // For scripts/bench_tokenizers_hf.py, which checks that it ran on the same input.
    benchmark::AddCustomContext("copies", std::to_string(copies));
    benchmark::AddCustomContext("documents", std::to_string(input.texts.size()));
    benchmark::AddCustomContext("text_bytes", std::to_string(input.text_bytes));

    for (int64_t n : threads) {
      benchmark::RegisterBenchmark("preprocess", [&](benchmark::State& s) { preprocess(s, input); })
          ->Arg(n)
          ->ArgName("threads")
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("tokenize", [&](benchmark::State& s) { tokenize(s, input, *tok); })
          ->Arg(n)
          ->ArgName("threads")
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
