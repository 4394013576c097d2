#!/usr/bin/env bash
# Is `troupe replay` right on GPUs? Records 1F1B and interleaved (V = 2) pipeline runs over two
# GPUs, in one process and in two (mpirun, one GPU each), then predicts each schedule from the
# other's trace (`--what-if`) and compares with what the other run measured: step time (forward/
# backward ops) and bubble. The bar: within 2 points.
# Usage (repo root, 2+ GPUs, after `source .devdeps/env.sh`): bench/replay_accuracy.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
troupe=$(realpath "$build/apps/troupe")
out=${OUT:-/tmp}/replay
mkdir -p "$out"
# A GPT-2 1.5B-like pipeline: 24 layers, hidden 1600, seq 1024; 8 microbatches of 4 per iteration.
model=(--num-layers 24 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --vocab-size 50257
       --mock-data --bf16 --micro-batch-size 4 --global-batch-size 32 --train-iters 14 --log-interval 7
       --eval-iters 0 --lr 1e-4 --pipeline-model-parallel-size 2)
declare -A flags=([1f1b]="" [interleaved]="--num-virtual-stages-per-pipeline-rank 2")
declare -A whatif=([1f1b]="schedule=interleaved,v=2" [interleaved]="schedule=1f1b")
declare -A other=([1f1b]=interleaved [interleaved]=1f1b)

record() {  # MODE SCHEDULE
  local mode=$1 s=$2
  # shellcheck disable=SC2086
  if [ "$mode" = 1proc ]; then
    "$troupe" train "${model[@]}" ${flags[$s]} --trace "$out/$mode-$s.trace" >"$out/$mode-$s.log" 2>&1
  else
    mpirun -np 2 "$troupe" train "${model[@]}" ${flags[$s]} --devices 1 \
      --trace "$out/$mode-$s.trace" >"$out/$mode-$s.log" 2>&1
  fi || { echo "$mode $s failed:"; tail -5 "$out/$mode-$s.log"; }
}

# "STEP_MS BUBBLE_PCT" measured in a report; "STEP_MS BUBBLE_PCT" of its what-if line.
measured_of() {
  awk '/^step time:/ { s = $3 } /^bubble:/ { b = $2 } END { gsub("%", "", b); print s, b }' "$1"
}
predicted_of() {
  grep '^what-if' "$1" | head -1 | sed 's/.*predicted step \([0-9.]*\) ms.*bubble \([0-9.]*\)%.*/\1 \2/'
}

for mode in 1proc 2proc; do
  for s in 1f1b interleaved; do record "$mode" "$s"; done
  for s in 1f1b interleaved; do
    [ -e "$out/$mode-$s.trace" ] || [ -e "$out/$mode-$s.trace.rank0" ] || continue
    "$troupe" replay "$out/$mode-$s.trace" --what-if "${whatif[$s]}" \
      >"$out/$mode-$s.replay" 2>&1 || tail -3 "$out/$mode-$s.replay"
  done
done

echo "==== replay accuracy (step ms of forward/backward ops; bubble %)"
printf '%-6s %-28s %10s %10s %8s %9s %9s %8s\n' mode "predicted from -> run" "pred step" "meas step" "diff" \
  "pred bub" "meas bub" "points"
for mode in 1proc 2proc; do
  for s in 1f1b interleaved; do
    o=${other[$s]}
    [ -s "$out/$mode-$s.replay" ] && [ -s "$out/$mode-$o.replay" ] || continue
    read -r ps pb < <(predicted_of "$out/$mode-$s.replay")
    read -r ms mb < <(measured_of "$out/$mode-$o.replay")
    awk -v m="$mode" -v c="$s -> $o" -v ps="$ps" -v ms="$ms" -v pb="$pb" -v mb="$mb" 'BEGIN {
      printf "%-6s %-28s %10.2f %10.2f %+7.1f%% %8.1f%% %8.1f%% %+8.1f\n", m, c, ps, ms, 100 * (ps / ms - 1), pb, mb, pb - mb }'
  done
  for s in 1f1b interleaved; do
    [ -s "$out/$mode-$s.replay" ] || continue
    grep '^simulated with' "$out/$mode-$s.replay" | sed "s/^/$mode $s replayed: /"
  done
done
