#!/usr/bin/env bash
# Issue 21's bar for large models: a 1.3B GPT (GPT-3 XL's shape: 24 layers, hidden 2048, 16 heads,
# sequence 2048) trained through `troupe train` on one GPU at >= 70% MFU against the bf16 matmul
# peak measured in the same command (the baseline's peak.py). Beside it, PyTorch
# (train_gpt2_torch.py --compile, the same shape and micro batch) in the same command.
# Model FLOPs per token, one formula for both sides: 6 N + 12 L d T, N = 12 L d^2 (the layers'
# weights) + V d (the LM head), attention's 12 L d T uncut for causality (PaLM's convention).
# Ours runs at global batch = micro batch (one optimizer step per microbatch, as torch does) and
# at 8 microbatches per step (gradient accumulation, as a real run of this size would).
# Usage (repo root, after `source .devdeps/env.sh`): bench/mfu_1p3b.sh [BUILD_DIR]
#   MICRO_BATCHES="2 4" by default; TORCH=0 skips the PyTorch side.
set -uo pipefail
build=${1:-build}
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp}/mfu_1p3b
mkdir -p "$out"
L=24 d=2048 H=16 T=2048 V=50257
read -r -a micro <<<"${MICRO_BATCHES:-2 4}"
peak=$(python3 .baselines/peak.py | grep '"kind": "matmul"' | sed 's/.*"tflops_median": \([0-9.]*\).*/\1/')
echo "bf16 matmul peak: ${peak} TFLOP/s"
fpt=$(awk -v L=$L -v d=$d -v T=$T -v V=$V 'BEGIN { printf "%.0f", 6 * (12 * L * d * d + V * d) + 12 * L * d * T }')

# Mean "elapsed time per iteration (ms)" over the log's last two lines -> tokens/s.
tokens_per_s() {  # log tokens_per_iteration
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | tail -2 | grep -o '[0-9.]*$' |
    awk -v n="$2" '{ s += $1; k++ } END { if (k) printf "%.0f", n * 1000 / (s / k); else print 0 }'
}
row() {  # name mbs tokens/s
  awk -v name="$1" -v b="$2" -v t="$3" -v f="$fpt" -v p="$peak" 'BEGIN {
    tf = t * f / 1e12; printf "%-26s %3d %10.0f %8.1f %6.1f%%\n", name, b, t, tf, (p > 0 ? 100 * tf / p : 0) }'
}
rows=()
for B in "${micro[@]}"; do
  for accum in 1 8; do
    gbs=$((B * accum)) iters=$((accum == 1 ? 30 : 12))
    log="$out/troupe_b${B}_x${accum}.log"
    "$build/apps/troupe" train --num-layers $L --hidden-size $d --num-attention-heads $H --seq-length $T \
      --max-position-embeddings $T --vocab-size $V --mock-data --bf16 --micro-batch-size "$B" \
      --global-batch-size "$gbs" --train-iters "$iters" --log-interval $((iters / 3)) --eval-iters 0 --lr 1e-4 \
      >"$log" 2>&1 || { echo "troupe mbs $B x$accum failed:"; tail -5 "$log"; }
    rows+=("$(row "troupe train (x$accum accum)" "$B" "$(tokens_per_s "$log" $((gbs * T)))")")
  done
  if [ "${TORCH:-1}" = 1 ]; then
    log="$out/torch_b$B.log"
    python3 .baselines/train_gpt2_torch.py --layers $L --heads $H --dim $d --seq $T --batch "$B" --compile \
      --steps 20 --peak "$peak" >"$log" 2>&1 || { echo "torch mbs $B failed:"; tail -5 "$log"; }
    t=$(grep '^RESULT' "$log" | sed 's/.*"tokens_per_s_wall": \([0-9.]*\).*/\1/')
    rows+=("$(row "torch.compile" "$B" "${t:-0}")")
  fi
done
echo "==== 1.3B (L=$L d=$d T=$T), one GPU: tokens/s, model TFLOP/s ($fpt FLOPs/token), MFU of $peak"
printf '%-26s %3s %10s %8s %7s\n' run mbs tokens/s TFLOP/s MFU
printf '%s\n' "${rows[@]}"
