// Tokenizer throughput over the texts of a JSON-lines corpus, as Google Benchmark cases (wall
// time), for GPT-2 (Gpt2Tokenizer) and each HF tokenizer.json given (HfTokenizer; by default
// the Llama 3, Qwen3 and Mistral files in assets/tokenizers):
//   tokenizer/load                   Gpt2Tokenizer::from_files (vocab.json + merges.txt)
//   tokenizer/pretokenize            GPT-2's pre-tokenizer alone (pieces)
//   tokenizer/encode_cold/threads:N  every text once, N threads, each with its own clone() made
//                                    fresh (empty word cache) before the timed pass
//   tokenizer/encode_warm/threads:N  the same with the clones' caches warmed by an earlier pass
//   tokenizer/decode                 all the corpus's ids back to text
//   hf/<name>/load, hf/<name>/encode_cold/threads:N, hf/<name>/encode_warm/threads:N,
//   hf/<name>/decode                 the same for HfTokenizer (<name>: the tokenizer's folder)
// Counters: bytes (of text; of decoded text for decode), tokens, pieces, per second. --threads
// takes a list (1,4); each thread encodes every N-th document.
//
// scripts/bench_tokenizers_hf.py compares HF `tokenizers` with these (--tokenizer-model: the
// encode_cold rows of hf/<name>) and with bench/preprocess_bench's tokenize cases for GPT-2.
//
//   tokenizer_bench [--corpus assets/corpora/sotu.jsonl] [--threads 1]
//                   [--tokenizer-model assets/tokenizers/llama3 ...] [--benchmark_* flags]
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "bench/common/bench_main.hpp"
#include "data/gpt2_pretokenize.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "data/hf_tokenizer/hf_tokenizer.hpp"

namespace {

using benchmark::Counter;

std::vector<std::string> read_texts(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  TROUPE_CHECK(bool(in), "cannot open corpus ", path);
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at(key).get<std::string>());
  return texts;
}

// What every case reads: the tokenizer's files, the corpus's texts and their sizes.
struct Corpus {
  std::string vocab_file, merge_file;
  std::vector<std::string> texts;
  int64_t bytes = 0;
};

// Encodes all texts with one tokenizer per thread (thread t takes documents t, t + N, ...);
// returns the token count.
int64_t encode_all(const Corpus& corpus, const std::vector<std::unique_ptr<troupe::Tokenizer>>& workers) {
  const size_t threads = workers.size();
  std::vector<int64_t> counts(threads, 0);
  auto work = [&](size_t t) {
    std::vector<int32_t> ids;
    for (size_t d = t; d < corpus.texts.size(); d += threads) {
      ids.clear();
      workers[t]->encode_append(corpus.texts[d], ids);
      counts[t] += int64_t(ids.size());
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

std::vector<std::unique_ptr<troupe::Tokenizer>> clones(const troupe::Tokenizer& tok, int64_t n) {
  std::vector<std::unique_ptr<troupe::Tokenizer>> out;
  for (int64_t t = 0; t < n; ++t) out.push_back(tok.clone());
  return out;
}

void load(benchmark::State& state, const Corpus& corpus) {
  for (auto _ : state)
    benchmark::DoNotOptimize(troupe::Gpt2Tokenizer::from_files(corpus.vocab_file, corpus.merge_file).vocab_size());
}

void load_hf(benchmark::State& state, const std::string& path) {
  for (auto _ : state) benchmark::DoNotOptimize(troupe::HfTokenizer::from_path(path).vocab_size());
}

void pretokenize(benchmark::State& state, const Corpus& corpus) {
  int64_t pieces = 0;
  for (auto _ : state) {
    pieces = 0;
    for (const std::string& text : corpus.texts) {
      troupe::Gpt2Pretokenizer it(text);
      std::string_view piece;
      while (it.next(piece)) ++pieces;
    }
  }
  state.counters["bytes"] = Counter(double(corpus.bytes), Counter::kIsIterationInvariantRate);
  state.counters["pieces"] = Counter(double(pieces), Counter::kIsIterationInvariantRate);
}

void encode(benchmark::State& state, const Corpus& corpus, const troupe::Tokenizer& tok, bool warm) {
  auto workers = clones(tok, state.range(0));
  int64_t tokens = 0;
  if (warm) encode_all(corpus, workers);
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      workers = clones(tok, state.range(0));
      state.ResumeTiming();
    }
    tokens = encode_all(corpus, workers);
  }
  state.counters["bytes"] = Counter(double(corpus.bytes), Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = Counter(double(tokens), Counter::kIsIterationInvariantRate);
}

void decode(benchmark::State& state, const Corpus& corpus, const troupe::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const std::string& text : corpus.texts) tok.encode_append(text, ids);
  size_t decoded_bytes = 0;
  for (auto _ : state) decoded_bytes = tok.decode(ids).size();
  state.counters["bytes"] = Counter(double(decoded_bytes), Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = Counter(double(ids.size()), Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 and HF tokenizer.json tokenizer throughput, on Google Benchmark"};
  Corpus corpus{"assets/gpt2/gpt2-vocab.json", "assets/gpt2/gpt2-merges.txt", {}, 0};
  std::string corpus_file = "assets/corpora/sotu.jsonl", key = "text";
  std::vector<int64_t> threads = {1};
  std::vector<std::string> hf_models = {"assets/tokenizers/llama3", "assets/tokenizers/qwen3",
                                        "assets/tokenizers/mistral"};
  app.add_option("--vocab-file", corpus.vocab_file, "vocab.json");
  app.add_option("--merge-file", corpus.merge_file, "merges.txt");
  app.add_option("--corpus", corpus_file, "JSON lines file");
  app.add_option("--key", key, "the field holding the text");
  app.add_option("--threads", threads, "encoding threads, one tokenizer clone each (a list: 1,4)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--tokenizer-model", hf_models, "HF tokenizers: folders with tokenizer.json (a list)")->delimiter(',');
  return troupe::bench::bench_main(app, argc, argv, "tokenizer_bench", [&] {
    const troupe::Gpt2Tokenizer tok = troupe::Gpt2Tokenizer::from_files(corpus.vocab_file, corpus.merge_file);
    std::vector<std::pair<std::string, troupe::HfTokenizer>> hf;
    for (const std::string& path : hf_models)
      hf.emplace_back(std::filesystem::path(path).filename().string(), troupe::HfTokenizer::from_path(path));
    corpus.texts = read_texts(corpus_file, key);
    for (const std::string& t : corpus.texts) corpus.bytes += int64_t(t.size());
    benchmark::AddCustomContext("corpus", corpus_file);
    benchmark::AddCustomContext("corpus_documents", std::to_string(corpus.texts.size()));
    benchmark::AddCustomContext("corpus_bytes", std::to_string(corpus.bytes));

    benchmark::RegisterBenchmark("tokenizer/load", [&](benchmark::State& s) { load(s, corpus); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("tokenizer/pretokenize", [&](benchmark::State& s) { pretokenize(s, corpus); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (const bool warm : {false, true}) {
      benchmark::internal::Benchmark* b =
          benchmark::RegisterBenchmark(warm ? "tokenizer/encode_warm" : "tokenizer/encode_cold",
                                       [&, warm](benchmark::State& s) { encode(s, corpus, tok, warm); });
      for (int64_t n : threads) b->Arg(n);
      b->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("tokenizer/decode", [&](benchmark::State& s) { decode(s, corpus, tok); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (size_t i = 0; i < hf.size(); ++i) {
      const std::string prefix = "hf/" + hf[i].first;
      const troupe::HfTokenizer* h = &hf[i].second;
      const std::string path = hf_models[i];
      benchmark::RegisterBenchmark((prefix + "/load").c_str(), [path](benchmark::State& s) { load_hf(s, path); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      for (const bool warm : {false, true}) {
        benchmark::internal::Benchmark* b =
            benchmark::RegisterBenchmark((prefix + (warm ? "/encode_warm" : "/encode_cold")).c_str(),
                                         [&corpus, h, warm](benchmark::State& s) { encode(s, corpus, *h, warm); });
        for (int64_t n : threads) b->Arg(n);
        b->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
      }
      benchmark::RegisterBenchmark((prefix + "/decode").c_str(),
                                   [&corpus, h](benchmark::State& s) { decode(s, corpus, *h); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
