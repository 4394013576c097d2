#!/usr/bin/env bash
# Is `troupe replay` right on GPUs? Records pipeline runs over two GPUs under several schedules,
# in one process and in two (mpirun, one GPU each), then predicts every schedule from every other
# schedule's trace (`--what-if`) and compares with what that schedule's own run measured: step
# time (forward/backward ops; the median iteration, and the mean beside it) and bubble (the mean
# over the iterations that did not stall: `troupe replay --stall-threshold`, 3% over the median by
# default, leaves stalled ones out of the bubble and of the op times it predicts from). The issue's
# bar: within 2 points.
# Usage (repo root, 2+ GPUs, after `source .devdeps/env.sh`):
#   bench/replay_accuracy.sh [BUILD_DIR]   (SCHEDULES="1f1b interleaved zb-h1 zb-v" by default;
#                                           MODES="1proc 2proc" (2proc: a process per stage);
#                                           PP=2 stages (and GPUs); ITERS=14; UNTRACED=1 also runs
#                                           each schedule untraced, for what tracing costs)
# REPLAY_FROM=DIR replays the traces an earlier run left in DIR (no GPU: nothing is recorded) and
# writes the reports and the table under $OUT/replay as usual. REPLAY_FLAGS adds flags to every
# `troupe replay` (e.g. "--stall-threshold 0": stalled iterations kept).
set -uo pipefail
build=${1:-build}
troupe=$(realpath "$build/apps/troupe")
out=${OUT:-/tmp}/replay
mkdir -p "$out"
traces=${REPLAY_FROM:-$out}
read -r -a schedules <<<"${SCHEDULES:-1f1b interleaved zb-h1 zb-v}"
read -r -a modes <<<"${MODES:-1proc 2proc}"
iters=${ITERS:-14}
pp=${PP:-2}
# A GPT-2 1.5B-like pipeline: 24 layers, hidden 1600, seq 1024; 8 microbatches of 4 per iteration.
model=(--num-layers 24 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --vocab-size 50257
       --mock-data --bf16 --micro-batch-size 4 --global-batch-size 32 --train-iters "$iters"
       --log-interval "$((iters / 2))" --eval-iters 0 --lr 1e-4 --pipeline-model-parallel-size "$pp")
declare -A flags=([1f1b]="" [interleaved]="--num-virtual-stages-per-pipeline-rank 2"
                  [zb-h1]="--pipeline-schedule zb-h1" [zb-v]="--pipeline-schedule zb-v")
declare -A whatif=([1f1b]="schedule=1f1b" [interleaved]="schedule=interleaved,v=2"
                   [zb-h1]="schedule=zb-h1" [zb-v]="schedule=zb-v")

run_train() {  # MODE SCHEDULE LOG [--trace FILE]
  local mode=$1 s=$2 log=$3
  shift 3
  # shellcheck disable=SC2086
  if [ "$mode" = 1proc ]; then
    "$troupe" train "${model[@]}" ${flags[$s]} "$@" >"$log" 2>&1
  else
    mpirun -np "$pp" "$troupe" train "${model[@]}" ${flags[$s]} --devices 1 "$@" >"$log" 2>&1
  fi || { echo "$mode $s failed:"; tail -5 "$log"; }
}
# The GPUs' SM clock and power every 100 ms while a run records (a GPU that never idles may clock
# down: ops of one schedule then run slower than the same ops under another).
sample_gpus() { nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null & }
record() {  # MODE SCHEDULE
  local mode=$1 s=$2 smi=""
  if command -v nvidia-smi >/dev/null; then sample_gpus "$out/$mode-$s.gpus"; smi=$!; fi
  run_train "$mode" "$s" "$out/$mode-$s.log" --trace "$out/$mode-$s.trace"
  [ -z "$smi" ] || kill "$smi" 2>/dev/null
  # UNTRACED=1: the same run without --trace, for what tracing costs.
  [ "${UNTRACED:-0}" = 1 ] && run_train "$mode" "$s" "$out/$mode-$s.untraced.log"
}
# Mean "elapsed time per iteration" over the log's last interval.
iteration_ms() { awk -F'elapsed time per iteration \\(ms\\): ' 'NF > 1 { split($2, a, " "); t = a[1] } END { print t }' "$1" 2>/dev/null; }
# "MEAN_SM_MHZ MEAN_W" per GPU index, over the samples of a run's second half.
gpu_clocks() {
  awk -F', *' '{ i[NR] = $1; c[NR] = $2; p[NR] = $3 } END {
    for (r = int(NR / 2) + 1; r <= NR; ++r) { n[i[r]]++; sc[i[r]] += c[r]; sp[i[r]] += p[r] }
    for (g in n) printf "gpu%s %.0f MHz %.0f W  ", g, sc[g] / n[g], sp[g] / n[g] }' "$1" 2>/dev/null
}
recorded() { [ -e "$traces/$1.trace" ] || [ -e "$traces/$1.trace.rank0" ]; }

# "MEDIAN_STEP_MS MEAN_STEP_MS BUBBLE_PCT" measured in a replay report (a stalled iteration moves
# the mean, not the median: the table compares with the median, and shows the mean's difference
# beside it); "STEP_MS BUBBLE_PCT" of its what-if line.
measured_of() {
  awk '/^step time:/ { s = $3; m = s; for (i = 4; i < NF; ++i) if ($i == "(median") m = $(i + 1) }
       /^bubble:/ { b = $2 } END { gsub("%", "", b); print m, s, b }' "$1"
}
predicted_of() {
  grep '^what-if' "$1" | head -1 | sed 's/.*predicted step \([0-9.]*\) ms.*bubble \([0-9.]*\)%.*/\1 \2/'
}

for mode in "${modes[@]}"; do
  [ -n "${REPLAY_FROM:-}" ] || for s in "${schedules[@]}"; do record "$mode" "$s"; done
  for s in "${schedules[@]}"; do
    recorded "$mode-$s" || continue
    # shellcheck disable=SC2086
    "$troupe" replay "$traces/$mode-$s.trace" ${REPLAY_FLAGS:-} >"$out/$mode-$s.self" 2>&1 || tail -3 "$out/$mode-$s.self"
    for t in "${schedules[@]}"; do
      [ "$s" != "$t" ] || continue
      # shellcheck disable=SC2086
      "$troupe" replay "$traces/$mode-$s.trace" ${REPLAY_FLAGS:-} --what-if "${whatif[$t]}" \
        >"$out/$mode-$s-to-$t.replay" 2>&1 || tail -3 "$out/$mode-$s-to-$t.replay"
    done
  done
done

echo "==== replay accuracy (step ms of forward/backward ops; bubble %)"
printf '%-6s %-28s %10s %10s %8s %9s %9s %9s %8s\n' mode "predicted from -> run" "pred step" "meas step" "diff" \
  "vs mean" "pred bub" "meas bub" "points"
for mode in "${modes[@]}"; do
  for s in "${schedules[@]}"; do
    for t in "${schedules[@]}"; do
      [ "$s" != "$t" ] && [ -s "$out/$mode-$s-to-$t.replay" ] && [ -s "$out/$mode-$t.self" ] || continue
      read -r ps pb < <(predicted_of "$out/$mode-$s-to-$t.replay")
      read -r ms mean mb < <(measured_of "$out/$mode-$t.self")
      awk -v m="$mode" -v c="$s -> $t" -v ps="$ps" -v ms="$ms" -v mean="$mean" -v pb="$pb" -v mb="$mb" 'BEGIN {
        printf "%-6s %-28s %10.2f %10.2f %+7.1f%% %+8.1f%% %8.1f%% %8.1f%% %+8.1f\n", m, c, ps, ms, 100 * (ps / ms - 1),
          100 * (ps / mean - 1), pb, mb, pb - mb }'
    done
  done
  for s in "${schedules[@]}"; do
    [ -s "$out/$mode-$s.self" ] || continue
    grep '^simulated with' "$out/$mode-$s.self" | sed "s/^/$mode $s replayed: /"
    line="$mode $s: $(iteration_ms "$traces/$mode-$s.log") ms/iteration traced"
    [ -s "$traces/$mode-$s.untraced.log" ] && line+=", $(iteration_ms "$traces/$mode-$s.untraced.log") untraced"
    [ -s "$traces/$mode-$s.gpus" ] && line+="; $(gpu_clocks "$traces/$mode-$s.gpus")"
    echo "$line"
  done
done
