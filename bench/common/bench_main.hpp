// The main of a Google Benchmark executable in bench/ that has flags of its own (the op, data
// and runtime benchmarks). CLI11 parses ours, and every other argument must be one of Google
// Benchmark's (--benchmark_*), which benchmark::Initialize then reads: a misspelt flag stops
// the run instead of being ignored (STYLE.md 15).
//
//   int main(int argc, char** argv) {
//     CLI::App app{"Causal attention forward/backward (CUDA, bf16), on Google Benchmark"};
//     app.add_option("--iters", iters, "timed calls per case");
//     return troupe::bench::bench_main(app, argc, argv, "attention_bench", [&] {
//       ... benchmark::RegisterBenchmark(...) ...
//       benchmark::RunSpecifiedBenchmarks();
//       benchmark::Shutdown();
//       return 0;
//     });
//   }
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace troupe::bench {

// Parses argv with app (extras allowed; unless app has a footer, --help ends with a line on
// Google Benchmark's flags), refuses an extra that is not --benchmark_* ("<program>: unknown
// argument X (see --help)", status 2), calls benchmark::Initialize, then returns body's status.
// body registers the cases, runs them and prints what else it reports; an exception out of it
// ends the run with "<program>: <what>" on stderr and status 1. --help, or a bad value of one
// of our flags, returns CLI11's status without running body.
int bench_main(CLI::App& app, int argc, char** argv, const char* program, const std::function<int()>& body);

}  // namespace troupe::bench
