#!/usr/bin/env bash
# The fuzz-and-sanitizer stage meant for CI (not in scripts/test.sh yet: its time on the 2-core
# CI machine is not measured): every fuzz target for RUNS inputs (default 300), then the tests
# of the parsers and the data path (tests/data, tests/storage, tests/model/hf, trace_test) built
# with ASan + UBSan in build-fuzz, where scripts/fuzz.sh compiled the libraries under test.
# Usage: scripts/fuzz_and_sanitize.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fuzz.sh "${1:-300}"
sanitized=()
for t in tests/data/*_test.cpp tests/storage/*_test.cpp tests/model/hf/*_test.cpp tests/schedules/trace_test.cpp; do
  name=$(basename "$t" .cpp)
  [[ $name == *_cuda_test ]] || sanitized+=("$name")
done
cmake --build build-fuzz -j"$(nproc)" --target "${sanitized[@]}"
regex="^($(IFS='|'; echo "${sanitized[*]}"))\$"
(cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   ctest --output-on-failure -j"$(nproc)" -R "$regex")
