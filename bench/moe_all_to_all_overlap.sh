#!/usr/bin/env bash
# Where the expert-parallel all-to-alls run (issue 20), over 2 GPUs with
# --expert-model-parallel-size 2, traced: the Mixtral- and DeepSeek-shaped models of
# bench/moe_train.sh, each with the all-to-alls on the stage's compute stream
# (--moe-all-to-all-on-compute-stream, the reference), on a stream of their own (the default),
# and for DeepSeek (a shared expert) also beside the shared expert (--moe-shared-expert-overlap);
# then each forward beside the backward before it (--overlap-moe-expert-parallel-comm, "lanes";
# for DeepSeek also with the shared expert beside, "lanes+overlap").
# Per run: tokens/s (mean of the last three log lines) and its ratio to the reference, the
# losses' last value, and from `troupe replay` of the trace the all-to-all time per iteration and
# stage, the share of it hidden under the shared expert, the share while another op (another
# microbatch's work) was in flight, and the share under either.
# Usage (repo root, 2 GPUs, after `source .devdeps/env.sh`):
#   bench/moe_all_to_all_overlap.sh [BUILD_DIR] [ITERS]   (MBS=8; EP=2; SHAPES="mixtral deepseek")
# ITERS (default 60) of at least 40: the log's last three intervals of 10 then leave out the
# first ten iterations' start-up.
set -uo pipefail
build=${1:-build}
iters=${2:-60}
troupe=$build/apps/troupe
out=${OUT:-/tmp}/moe_overlap
mkdir -p "$out"
mbs=${MBS:-8}
ep=${EP:-2}
tokens_per_iter=$((32 * 512))
read -r -a shapes <<<"${SHAPES:-mixtral deepseek}"

source "$(dirname "$0")/moe_bench_lib.sh"
moe_preprocess
# shellcheck disable=SC2207
body=($(moe_body "$iters" "$mbs") --lr 1e-3 --log-interval 10 --devices "$ep" --expert-model-parallel-size "$ep")
declare -A mode_flags=([compute]="--moe-all-to-all-on-compute-stream" [own]="" [overlap]="--moe-shared-expert-overlap"
  [lanes]="--overlap-moe-expert-parallel-comm" [lanes+overlap]="--overlap-moe-expert-parallel-comm --moe-shared-expert-overlap")

rows=()
for shape in "${shapes[@]}"; do
  case $shape in
    mixtral) model=$MOE_MIXTRAL modes=(compute own lanes) ;;
    deepseek) model=$MOE_DEEPSEEK modes=(compute own overlap lanes lanes+overlap) ;;
    *) echo "unknown shape $shape (mixtral, deepseek)"; continue ;;
  esac
  reference=0
  for mode in "${modes[@]}"; do
    run=$shape-$mode
    # shellcheck disable=SC2086
    "$troupe" train "${body[@]}" $model ${mode_flags[$mode]} --trace "$out/$run.trace" > "$out/$run.log" 2>&1 ||
      { echo "$run failed:"; tail -5 "$out/$run.log"; continue; }
    "$troupe" replay "$out/$run.trace" > "$out/$run.replay" 2>&1 || { echo "replay $run failed:"; tail -3 "$out/$run.replay"; }
    ms=$(last_three_mean "$out/$run.log" 'elapsed time per iteration (ms):')
    tps=$(awk -v ms="${ms:-0}" -v n="$tokens_per_iter" 'BEGIN { printf "%.0f", (ms > 0 ? n * 1000 / ms : 0) }')
    [ "$mode" = compute ] && reference=$tps
    loss=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$run.log" | tail -1 | awk '{print $3}')
    a2a=$(grep '^expert all-to-all' "$out/$run.replay" | sed 's/^expert all-to-all: \([0-9.]*\) ms.*/\1/')
    hidden=$(grep '^expert all-to-all' "$out/$run.replay" | sed 's/.*, \([0-9.]*\)% hidden.*/\1/')
    beside=$(grep '^expert all-to-all' "$out/$run.replay" | sed 's/.*, \([0-9.]*\)% beside another op.*/\1/')
    either=$(grep '^expert all-to-all' "$out/$run.replay" | sed 's/.*, \([0-9.]*\)% under either.*/\1/')
    rows+=("$(awk -v r="$run" -v t="$tps" -v ref="$reference" -v l="${loss:--}" -v a="${a2a:--}" -v h="${hidden:--}" \
      -v b="${beside:--}" -v e="${either:--}" \
      'BEGIN { printf "%-22s %10d %6.2fx %12s %16s %9s%% %9s%% %9s%%", r, t, (ref > 0 ? t / ref : 0), l, a, h, b, e }')")
  done
done
echo "==== expert all-to-all streams (EP$ep over $ep GPUs, bf16, $iters iterations; x: against the compute stream)"
printf '%-22s %10s %7s %12s %16s %10s %10s %10s\n' run tokens/s ratio "last loss" "a2a ms/it/stage" "shared" \
  "other op" either
printf '%s\n' "${rows[@]}"
