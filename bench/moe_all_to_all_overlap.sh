#!/usr/bin/env bash
# How much of the expert-parallel all-to-all the shared expert hides (issue 20): the
# DeepSeek-shaped model of bench/moe_train.sh (64 experts top-6, a shared expert) over 2 GPUs
# with --expert-model-parallel-size 2, traced, without and with --moe-shared-expert-overlap
# (the all-to-alls on their own stream beside the shared expert). Per mode: tokens/s (mean of
# the last three log lines), the losses' last value, and from `troupe replay` of the trace the
# all-to-all time per iteration and stage and the share of it hidden under the shared expert.
# Usage (repo root, 2 GPUs, after `source .devdeps/env.sh`):
#   bench/moe_all_to_all_overlap.sh [BUILD_DIR] [ITERS]   (MBS=8; EP=2)
set -uo pipefail
build=${1:-build}
iters=${2:-40}
troupe=$build/apps/troupe
out=${OUT:-/tmp}/moe_overlap
mkdir -p "$out"
mbs=${MBS:-8}
ep=${EP:-2}
tokens_per_iter=$((32 * 512))

source "$(dirname "$0")/moe_bench_lib.sh"
moe_preprocess
# shellcheck disable=SC2207
common=($(moe_body "$iters" "$mbs") --lr 1e-3 --log-interval 10 $MOE_DEEPSEEK --devices "$ep"
        --expert-model-parallel-size "$ep")

rows=()
for mode in plain overlap; do
  flags=()
  [ "$mode" = overlap ] && flags=(--moe-shared-expert-overlap)
  "$troupe" train "${common[@]}" "${flags[@]}" --trace "$out/$mode.trace" > "$out/$mode.log" 2>&1 ||
    { echo "$mode failed:"; tail -5 "$out/$mode.log"; continue; }
  "$troupe" replay "$out/$mode.trace" > "$out/$mode.replay" 2>&1 || { echo "replay $mode failed:"; tail -3 "$out/$mode.replay"; }
  ms=$(last_three_mean "$out/$mode.log" 'elapsed time per iteration (ms):')
  loss=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$mode.log" | tail -1 | awk '{print $3}')
  a2a=$(grep '^expert all-to-all' "$out/$mode.replay" | sed 's/^expert all-to-all: \([0-9.]*\) ms.*/\1/')
  hidden=$(grep '^expert all-to-all' "$out/$mode.replay" | sed 's/.*, \([0-9.]*\)% hidden.*/\1/')
  rows+=("$(awk -v m="$mode" -v ms="${ms:-0}" -v n="$tokens_per_iter" -v l="${loss:--}" -v a="${a2a:--}" -v h="${hidden:--}" \
    'BEGIN { printf "%-8s %12.0f %12s %16s %9s%%", m, (ms > 0 ? n * 1000 / ms : 0), l, a, h }')")
done
echo "==== expert all-to-all beside the shared expert (EP$ep over $ep GPUs, DeepSeek-shaped, bf16, $iters iterations)"
printf '%-8s %12s %12s %16s %10s\n' mode tokens/s "last loss" "a2a ms/it/stage" hidden
printf '%s\n' "${rows[@]}"
