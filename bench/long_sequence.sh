#!/usr/bin/env bash
# The longest sequence a 1.3B Llama-shaped model (24 layers, hidden 2048, 16 heads, SwiGLU 5632,
# RoPE) trains at on one GPU: `troupe train` at T = 4096, 8192, ... (micro-batch 1, bf16, mock
# data, 3 iterations), without recompute and with full recompute (uniform 1), until a run fails.
# tokens/s is set against the same model at T=4096 without recompute (the same tokens per
# iteration are not kept: one sequence a microbatch, so longer T is more tokens and more
# attention work per token), in the same command. Then the same model with context parallelism
# over two GPUs (cp2: --context-parallel-size 2, each GPU holding T/2 tokens of the sequence and
# running the ring's block attention), which reaches longer T; skipped with fewer than 2 GPUs.
# Its tokens/s is the whole run's (two GPUs).
# Usage (repo root, after `source .devdeps/env.sh`): bench/long_sequence.sh BUILD_DIR [MAX_T]
# MODES="none cp2" picks the runs (default: none full cp2).
set -uo pipefail
source "$(dirname "$0")/scaling_lib.sh"
build=${1:?usage: long_sequence.sh BUILD_DIR [MAX_T]}
max_t=${2:-65536}
troupe=$build/apps/troupe
out=${OUT:-/tmp}/long_sequence
mkdir -p "$out"
model="--model llama-tiny --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --num-query-groups 16"
model+=" --ffn-hidden-size 5632"
printf '%-10s %8s %10s %12s %8s %s\n' recompute T ms/it tokens/s GiB ratio > "$out/summary.txt"
base=""
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
for mode in ${MODES:-none full cp2}; do
  extra=""
  [ $mode = full ] && extra="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  if [ $mode = cp2 ]; then
    if [ "$gpus" -lt 2 ]; then
      printf '%-10s skipped: needs 2 GPUs, %s visible\n' $mode "$gpus" >> "$out/summary.txt"
      continue
    fi
    extra="--context-parallel-size 2"
  fi
  for ((t = 4096; t <= max_t; t *= 2)); do
    log=$out/$mode-$t.log
    # shellcheck disable=SC2086
    timeout 300 "$troupe" train $model --seq-length $t --max-position-embeddings $t --mock-data --vocab-size 50257 \
        --bf16 --micro-batch-size 1 --global-batch-size 1 --train-iters 3 --log-interval 1 --eval-iters 0 --lr 1e-4 \
        $extra > "$log" 2>&1
    ms=$(ms_of "$log")
    if [ -z "$ms" ]; then
      printf '%-10s %8d FAILED: %s\n' $mode $t "$(grep -m1 -o 'error.*' "$log" | cut -c1-120)" >> "$out/summary.txt"
      break
    fi
    tps=$(awk -v ms="$ms" -v t=$t 'BEGIN {printf "%.0f", t / (ms / 1000)}')
    [ -n "$base" ] || base=$tps
    printf '%-10s %8d %10.1f %12s %8s %.3f\n' $mode $t "$ms" "$tps" "$(memory_of "$log" | awk '{print $2}')" \
        "$(awk -v a="$tps" -v b="$base" 'BEGIN {print a / b}')" >> "$out/summary.txt"
  done
done
cat "$out/summary.txt"
