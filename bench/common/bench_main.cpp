// The main that the Google Benchmark executables in bench/ share (bench_main.hpp).
#include "bench/common/bench_main.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include <benchmark/benchmark.h>

namespace troupe::bench {

int bench_main(CLI::App& app, int argc, char** argv, const char* program, const std::function<int()>& body) {
  app.allow_extras();
  if (app.get_footer().empty())
    app.footer(
        "Google Benchmark's flags pass through: --benchmark_filter=REGEX --benchmark_min_time=SECONDS "
        "--benchmark_repetitions=N --benchmark_out=FILE --benchmark_out_format=json");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const std::string& extra : app.remaining())
    if (!extra.starts_with("--benchmark_")) {
      std::fprintf(stderr, "%s: unknown argument %s (see --help)\n", program, extra.c_str());
      return 2;
    }
  benchmark::Initialize(&argc, argv);
  try {
    return body();
  } catch (const std::exception& e) {  // a missing file, no memory: one line, not std::terminate
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace troupe::bench
