#!/usr/bin/env bash
# The fuzz and sanitizer stage of the test command (scripts/test.sh runs it after the suite when
# clang is installed; docs/testing.md, "Fuzzing and sanitizers"). Fails on any finding:
#   1. every fuzz target of fuzz/ for RUNS inputs (scripts/fuzz.sh: clang, ASan + UBSan, build-fuzz);
#   2. in the same build, the parser and data-path tests under ASan + UBSan;
#   3. in build-tsan, the actor-runtime tests under ThreadSanitizer (fuzz/tsan.supp: CAF's own).
# The tests are fuzz/sanitized_tests.cmake's lean binaries (label `sanitized`). Without --full,
# the CI subset (label `sanitized_ci`, 2000 inputs a target, the tests that load whole HF
# tokenizers left out): about 8 minutes on two idle cores from cold (docs/testing.md). --full: every sanitized test,
# whole, and 20000 inputs a target, by hand. --tsan-caf PREFIX: a CAF 0.17.6 built with -fsanitize=thread and
# installed in PREFIX (docs/testing.md says how), with which build-tsan also runs the actor tests.
# Usage: scripts/fuzz_and_sanitize.sh [--full] [--tsan-caf PREFIX] [RUNS]
#   (the build directories: TROUPE_FUZZ_BUILD, default build-fuzz; TROUPE_TSAN_BUILD, build-tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
caf_args=(-DTROUPE_TSAN_CAF=OFF -UCAF_INCLUDE_DIR -UCAF_CORE_LIBRARY -UCAF_IO_LIBRARY)  # Debian's libcaf
while [ $# -gt 0 ]; do
  case $1 in
    --full) full=1 ;;
    --tsan-caf)
      caf=$(realpath "$2")
      [ -f "$caf/lib/libcaf_core.so" ] || { echo "sanitize: --tsan-caf $2 has no lib/libcaf_core.so"; exit 1; }
      caf_args=(-DTROUPE_TSAN_CAF=ON "-DCAF_INCLUDE_DIR=$caf/include" "-DCAF_CORE_LIBRARY=$caf/lib/libcaf_core.so"
                "-DCAF_IO_LIBRARY=$caf/lib/libcaf_io.so")
      shift ;;
    *) break ;;
  esac
  shift
done
runs=${1:-$([ $full = 1 ] && echo 20000 || echo 2000)}
label=$([ $full = 1 ] && echo sanitized || echo sanitized_ci)
# The CI subset leaves out the hf_tokenizer_test cases that load the bundled 2-11 MB
# tokenizer.json files or compare with Hugging Face's (12-20 s each under ASan, 2+ minutes in
# all); the hf_tokenizer fuzz target and the small-tokenizer cases go through the same code.
slow='*HfTokenizerVsJs.*:HfTokenizer.SizesIdsAndSpecialTokens:HfTokenizer.ClonesShareTheFilesAndKeepTheirOwnCache'
slow+=':HfTokenizer.LongRunsUseTheHeapMergeLoop:BuildTokenizer.HuggingFaceTokenizer'
export GTEST_FILTER=$([ $full = 1 ] && echo '*' || echo "-$slow")
jobs=$(nproc)
TIMEFORMAT='sanitize: that took %R s (%U s user, %S s sys)'

# Builds the tests of `label` in build dir $1 (their names are their targets) and runs them.
run_sanitized_tests() {
  local build=$1
  local tests
  mapfile -t tests < <(cd "$build" && ctest -N -L "^$label\$" 2>/dev/null | awk '/Test +#/ {print $3}')
  [ ${#tests[@]} -gt 0 ] || { echo "sanitize: no tests labelled $label in $build"; exit 1; }
  cmake --build "$build" -j"$jobs" --target "${tests[@]}"
  (cd "$build" && ctest --output-on-failure -j"$jobs" -L "^$label\$")
}

time scripts/fuzz.sh "$runs"
time run_sanitized_tests "${TROUPE_FUZZ_BUILD:-build-fuzz}"

tsan_build=${TROUPE_TSAN_BUILD:-build-tsan}
cmake -S . -B "$tsan_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -D_GLIBCXX_ASSERTIONS" -DTROUPE_CUDA=OFF -DTROUPE_TSAN=ON \
      "${caf_args[@]}" >/dev/null
time run_sanitized_tests "$tsan_build"
echo "sanitize: no findings ($([ $full = 1 ] && echo full || echo CI subset))"
