#!/usr/bin/env bash
# Before and after a change that must not move the numbers, in one device call on one GPU:
# train_bench and `troupe train` tokens/s on GPT-2 124M (bf16, micro batch 16, random tokens)
# and decode_bench ms per decode step at batch 1/16/64, each run alternately with the baseline
# build (BASE: bin/{train_bench,troupe,decode_bench} and lib/libtroupe_*.so of the old commit,
# which go first on LD_LIBRARY_PATH) and this build, REPS times. Prints a table last.
# Usage (repo root, after `source .devdeps/env.sh`): scripts/device_perf_compare.sh BASE BUILD [REPS]
set -uo pipefail
base=$(cd "$1" && pwd) build=$2 reps=${3:-2}
out=${OUT:-/tmp}/perf_compare
mkdir -p "$out"
vocab=(--vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt)

# which: base|new; the rest: the binary's name and arguments
run() {
  local which=$1 name=$2; shift 2
  if [ "$which" = base ]; then
    LD_LIBRARY_PATH="$base/lib:${LD_LIBRARY_PATH:-}" "$base/bin/$name" "$@"
  else
    case $name in troupe) "$build/apps/troupe" "$@" ;; *) "$build/bench/$name" "$@" ;; esac
  fi
}

declare -A sums counts
add() { sums[$1]=$(python3 -c "print(${sums[$1]:-0} + $2)"); counts[$1]=$(( ${counts[$1]:-0} + 1 )); }

for rep in $(seq 1 "$reps"); do
  for which in base new; do
    log=$out/train_bench.$which.$rep.log
    run $which train_bench --model gpt2-124m --micro-batch-size 16 --mock-data --train-iters 40 "${vocab[@]}" > "$log" 2>&1
    v=$(grep -o 'throughput: [0-9]* tokens/s' "$log" | grep -o '[0-9]*' | head -1)
    [ -n "$v" ] && add "train_bench tokens/s|$which" "$v" || echo "train_bench $which failed: $(tail -3 "$log")"

    log=$out/troupe_train.$which.$rep.log
    run $which troupe train --model gpt2-124m --bf16 --micro-batch-size 16 --mock-data --train-iters 40 \
        --eval-iters 0 --log-interval 10 "${vocab[@]}" > "$log" 2>&1
    v=$(grep -o '([0-9]* tokens/s)' "$log" | grep -o '[0-9]*' | head -1)
    [ -n "$v" ] && add "troupe train tokens/s|$which" "$v" || echo "troupe train $which failed: $(tail -3 "$log")"

    log=$out/decode_bench.$which.$rep.log
    run $which decode_bench --model gpt2-124m --batches 1,16,64 > "$log" 2>&1
    for b in 1 16 64; do
      v=$(grep '^RESULT' "$log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line.split(' ', 1)[1])
    if r['batch'] == $b: print(r['ms_per_decode_step'])")
      [ -n "$v" ] && add "decode ms/step batch $b|$which" "$v" || echo "decode_bench $which failed: $(tail -3 "$log")"
    done
  done
done

echo "==== before (base: $(cat "$base/COMMIT" 2>/dev/null || echo '?')) and after (this build), mean of $reps runs each, alternating"
printf '%-28s %14s %14s %8s\n' measure before after ratio
for m in "train_bench tokens/s" "troupe train tokens/s" "decode ms/step batch 1" "decode ms/step batch 16" "decode ms/step batch 64"; do
  b=${sums["$m|base"]:-} a=${sums["$m|new"]:-}
  if [ -z "$b" ] || [ -z "$a" ]; then printf '%-28s %14s %14s\n' "$m" "${b:-fail}" "${a:-fail}"; continue; fi
  python3 -c "
b = $b / ${counts["$m|base"]}; a = $a / ${counts["$m|new"]}
print('%-28s %14.3f %14.3f %8.3f' % ('$m', b, a, a / b))"
done
