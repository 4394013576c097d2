#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, CPU only) in build-fuzz and runs
# each for RUNS inputs (default 2000) from its seeds (fuzz/text_seeds.py, make_seeds), with its
# dictionary fuzz/<target>.dict when there is one, two targets at a time. Fails on any crash,
# leak, timeout or sanitizer report; the input that found it lands in fuzz/crashes/ (once fixed,
# move it to fuzz/regressions/<target>/: those inputs run every time).
# The runs are repeatable: libFuzzer's seed is TROUPE_FUZZ_SEED (default 1); another seed, or more
# RUNS, explores other inputs.
# Usage: scripts/fuzz.sh [RUNS] [TARGET...]   (targets: jsonl, safetensors, ...; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2000}
shift || true
build=${TROUPE_FUZZ_BUILD:-build-fuzz}  # the build directory
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(jsonl indexed_dataset safetensors checkpoint_metadata hf_config hf_tokenizer
                                      chat_template trace config_file api_body)

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found; run scripts/setup.sh (it installs clang)"; exit 1; }
done
# The libraries under test get the coverage hooks (fuzzer-no-link) and ASan + UBSan
# (TROUPE_SANITIZE); the fuzz targets link libFuzzer itself. -O1 with line tables only: less
# compile time than -O2 -g, stacks still name file and line (-O0 compiles 40% faster but runs
# the inputs and the sanitized tests 3-8 times slower: no faster in all). Assertions stay on
# (no NDEBUG; libstdc++'s bounds checks too): a fuzzer should trip them.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -D_GLIBCXX_ASSERTIONS" \
      -DTROUPE_CUDA=OFF -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
cmake --build "$build" -j"$(nproc)" --target troupe_fuzz_seeds "${targets[@]/%/_fuzz}"

seeds=$build/fuzz-seeds
rm -rf "$seeds" && mkdir -p "$seeds"
python3 fuzz/text_seeds.py "$seeds"
"$build/fuzz/troupe_fuzz_seeds" "$seeds"

# The file-based targets write each input to a scratch file (fuzz/fuzz_util.hpp): in a folder of
# this run, in memory when /dev/shm is there, removed at the end.
TMPDIR=$(mktemp -d "$([ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/troupe-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p fuzz/crashes
status=$build/fuzz-status
rm -rf "$status" && mkdir -p "$status"

# One target: its log in $build/fuzz-<target>.log, "ok" or "failed" in $status/<target>.
fuzz_one() {
  local t=$1
  local corpus=$build/fuzz-corpus/$t  # grows between runs of this script; the seeds stay read-only
  mkdir -p "$corpus" "$seeds/$t"
  local extra=()
  [ -d "fuzz/regressions/$t" ] && extra+=("fuzz/regressions/$t")  # inputs that once found a bug (fixed)
  local dict=()
  [ -f "fuzz/$t.dict" ] && dict=("-dict=fuzz/$t.dict")
  local log=$build/fuzz-$t.log
  if "$build/fuzz/${t}_fuzz" -runs="$runs" -seed="${TROUPE_FUZZ_SEED:-1}" -max_len=65536 -timeout=20 \
       -rss_limit_mb=4096 "${dict[@]}" -artifact_prefix="fuzz/crashes/${t}-" "$corpus" "$seeds/$t" "${extra[@]}" \
       >"$log" 2>&1; then
    echo ok >"$status/$t"
  else
    echo failed >"$status/$t"
  fi
  echo "fuzz: $t ($runs runs): $(cat "$status/$t"), $(grep -o -E 'Done [0-9]+ runs in [0-9]+ second\(s\)' "$log" ||
                                                       echo "see $log")"
}

jobs=$(nproc)
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait

failed=()
for t in "${targets[@]}"; do
  [ "$(cat "$status/$t" 2>/dev/null)" = ok ] && continue
  failed+=("$t")
  log=$build/fuzz-$t.log
  echo "fuzz: $t FAILED; the report (end of $log):"
  grep -E "ERROR:|runtime error|api_body_fuzz:|SUMMARY|Test unit written" "$log" | head -20 || tail -30 "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in ${failed[*]}: reproduce with $build/fuzz/<target>_fuzz fuzz/crashes/<file>"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran $runs inputs each without a report"
