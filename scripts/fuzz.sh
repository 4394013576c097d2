#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, CPU only) in build-fuzz and runs
# each for RUNS inputs (default 2000) from its seeds (fuzz/text_seeds.py, make_seeds). Fails on
# any crash, leak, timeout or sanitizer report; the input that found it lands in fuzz/crashes/
# (once fixed, move it to fuzz/regressions/<target>/: those inputs run every time).
# Usage: scripts/fuzz.sh [RUNS] [TARGET...]   (targets: jsonl, safetensors, ...; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2000}
shift || true
build=build-fuzz
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(jsonl indexed_dataset safetensors checkpoint_metadata hf_config hf_tokenizer
                                      chat_template trace config_file)

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found; run scripts/setup.sh (it installs clang)"; exit 1; }
done
# The libraries under test get the coverage hooks (fuzzer-no-link) and ASan + UBSan
# (TROUPE_SANITIZE); the fuzz targets link libFuzzer itself.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DTROUPE_CUDA=OFF -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
cmake --build "$build" -j"$(nproc)" --target troupe_fuzz_seeds "${targets[@]/%/_fuzz}"

seeds=$build/fuzz-seeds
rm -rf "$seeds" && mkdir -p "$seeds"
python3 fuzz/text_seeds.py "$seeds"
"$build/fuzz/troupe_fuzz_seeds" "$seeds"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p fuzz/crashes
failed=()
for t in "${targets[@]}"; do
  corpus=$build/fuzz-corpus/$t  # grows between runs of this script; the seeds stay read-only
  mkdir -p "$corpus" "$seeds/$t"
  regressions=()  # inputs that once found a bug (fixed), run every time
  [ -d "fuzz/regressions/$t" ] && regressions=("fuzz/regressions/$t")
  log=$build/fuzz-$t.log
  echo "fuzz: $t ($runs runs)"
  if ! "$build/fuzz/${t}_fuzz" -runs="$runs" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
         -artifact_prefix="fuzz/crashes/${t}-" "$corpus" "$seeds/$t" "${regressions[@]}" >"$log" 2>&1; then
    failed+=("$t")
    echo "fuzz: $t FAILED; the report (end of $log):"
    grep -E "ERROR:|runtime error|SUMMARY|Test unit written" "$log" | head -20 || tail -30 "$log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in ${failed[*]}: reproduce with $build/fuzz/<target>_fuzz fuzz/crashes/<file>"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran $runs inputs each without a report"
