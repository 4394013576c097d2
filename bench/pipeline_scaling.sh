#!/usr/bin/env bash
# Pipeline parallelism over NCCL on one node: the same GPT trained with PP = 1, 2 and 4 (as
# many as there are GPUs), each with a trace; then `troupe replay` reports the measured bubble
# against theory and the what-if prediction of the other shapes from the PP = 2 trace.
# Usage (repo root, after `source .devdeps/env.sh`): bench/pipeline_scaling.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
troupe=$build/apps/troupe
gpus=$(nvidia-smi -L | wc -l)
out=${OUT:-/tmp}/pipeline
mkdir -p "$out"
# GPT-2 XL-like: 48 layers, hidden 1600, 25 heads, seq 1024; 8 microbatches of 4 per iteration.
model=(--model gpt2-124m --num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024
       --vocab-size 50257 --mock-data --bf16 --micro-batch-size 4 --global-batch-size 32 --train-iters 12
       --log-interval 4 --eval-iters 0 --lr 1e-4)
declare -A tps
for p in 1 2 4; do
  [ "$p" -le "$gpus" ] || continue
  "$troupe" train "${model[@]}" --pipeline-model-parallel-size "$p" --trace "$out/pp$p.trace" 2>&1 | tee "$out/pp$p.log"
  tps[$p]=$(grep '^summary' "$out/pp$p.log" | sed 's/.*(\([0-9]*\) tokens\/s).*/\1/')
done
for p in 2 4; do
  [ -f "$out/pp$p.trace" ] || continue
  "$troupe" replay "$out/pp$p.trace" --iteration 10 --what-if "p=1" --what-if "p=4" --what-if "schedule=interleaved,v=2" \
      --svg "$out/pp$p.svg" 2>&1 | tee "$out/pp$p.replay"
done
echo "==== summary (tokens/s per run; speedup against PP=1)"
for p in 1 2 4; do
  [ -n "${tps[$p]:-}" ] || continue
  awk -v p="$p" -v a="${tps[$p]}" -v b="${tps[1]:-0}" 'BEGIN { printf "PP=%d  %8.0f tokens/s  x%.2f\n", p, a, (b > 0 ? a / b : 0) }'
done
