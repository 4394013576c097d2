// Preprocessing throughput: `troupe preprocess` end to end (JSON parsing, GPT-2 tokenization,
// .bin/.idx writing) and the tokenization alone (texts already in memory, documents shared out
// among threads, one tokenizer clone each, fresh caches every run), with 1 thread and with all
// hardware threads, over the bundled corpora. Prints MB/s (of input bytes) and documents/s,
// best of --repeats; --json writes the same numbers for scripts/bench_tokenizers_hf.py, which
// measures HF `tokenizers` on the same texts and prints the ratios.
//
//   preprocess_bench [--copies 8] [--repeats 3] [--threads 1,16] [--json out.json]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "data/preprocess.hpp"
#include "base/check.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Measure {
  std::string what;
  int threads;
  double seconds;
  int64_t bytes, documents, tokens;
};

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Preprocess and tokenizer throughput on the bundled corpora"};
  std::vector<std::string> corpora = {source_dir() + "/assets/corpora/moby-dick.jsonl",
                                      source_dir() + "/assets/corpora/sotu.jsonl"};
  int copies = 8, repeats = 3;
  std::vector<int> threads = {1, int(std::max(1u, std::thread::hardware_concurrency()))};
  std::string json_out;
  app.add_option("--corpora", corpora, "JSON-lines files (key \"text\")")->capture_default_str();
  app.add_option("--copies", copies, "Times the corpora are repeated in the input")->capture_default_str();
  app.add_option("--repeats", repeats, "Runs per measurement (best is kept)")->capture_default_str();
  app.add_option("--threads", threads, "Thread counts")->delimiter(',')->capture_default_str();
  app.add_option("--json", json_out, "Also write the results here");
  CLI11_PARSE(app, argc, argv);

  try {
    // One input file: the corpora, `copies` times.
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("troupe-preprocess-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string input = (dir / "input.jsonl").string();
    std::vector<std::string> texts;
    {
      std::ofstream out(input, std::ios::binary);
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
    }
    const int64_t input_bytes = int64_t(std::filesystem::file_size(input));
    int64_t text_bytes = 0;
    for (const auto& t : texts) text_bytes += int64_t(t.size());
    std::printf("input: %zu documents, %.1f MB of JSON lines, %.1f MB of text (%d copies of %zu corpora)\n",
                texts.size(), input_bytes / 1e6, text_bytes / 1e6, copies, corpora.size());

    const auto load0 = Clock::now();
    const std::unique_ptr<troupe::Tokenizer> tok = troupe::build_tokenizer(gpt2());
    std::printf("tokenizer load: %.1f ms\n", since(load0) * 1e3);

    std::vector<Measure> results;
    for (int n : threads) {
      // End to end.
      Measure best{"preprocess", n, 1e30, input_bytes, 0, 0};
      for (int r = 0; r < repeats; ++r) {
        troupe::PreprocessOptions o;
        o.input = input;
        o.output_prefix = (dir / "out").string();
        o.tokenizer = gpt2();
        o.append_eod = true;
        o.workers = n;
        const auto t0 = Clock::now();
        const troupe::PreprocessResult res = troupe::preprocess_jsonl(o);
        const double s = since(t0);
        if (s < best.seconds) best = {"preprocess", n, s, input_bytes, res.documents, res.outputs[0].tokens};
      }
      results.push_back(best);
      // Tokenization alone.
      Measure tbest{"tokenize", n, 1e30, text_bytes, int64_t(texts.size()), 0};
      for (int r = 0; r < repeats; ++r) {
        std::vector<std::unique_ptr<troupe::Tokenizer>> clones;
        for (int t = 0; t < n; ++t) clones.push_back(tok->clone());
        std::atomic<size_t> next{0};
        std::atomic<int64_t> tokens{0};
        const auto t0 = Clock::now();
        auto work = [&](int t) {
          std::vector<int32_t> ids;
          int64_t count = 0;
          for (size_t d; (d = next.fetch_add(1)) < texts.size();) {
            ids.clear();
            clones[size_t(t)]->encode_append(texts[d], ids);
            count += int64_t(ids.size());
          }
          tokens += count;
        };
        std::vector<std::thread> pool;
        for (int t = 1; t < n; ++t) pool.emplace_back(work, t);
        work(0);
        for (auto& th : pool) th.join();
        const double s = since(t0);
        if (s < tbest.seconds) tbest = {"tokenize", n, s, text_bytes, int64_t(texts.size()), tokens.load()};
      }
      results.push_back(tbest);
    }
    std::filesystem::remove_all(dir);

    std::printf("%-11s %7s %9s %10s %12s %12s\n", "what", "threads", "seconds", "MB/s", "docs/s", "tokens/s");
    nlohmann::json js = nlohmann::json::array();
    for (const Measure& m : results) {
      std::printf("%-11s %7d %9.3f %10.1f %12.0f %12.0f\n", m.what.c_str(), m.threads, m.seconds,
                  m.bytes / 1e6 / m.seconds, m.documents / m.seconds, m.tokens / m.seconds);
      js.push_back({{"what", m.what}, {"threads", m.threads}, {"seconds", m.seconds}, {"bytes", m.bytes},
                    {"documents", m.documents}, {"tokens", m.tokens}});
    }
    if (!json_out.empty()) {
      std::ofstream out(json_out);
      out << nlohmann::json{{"copies", copies}, {"corpora", corpora}, {"results", js}}.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "preprocess_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
