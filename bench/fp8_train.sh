#!/usr/bin/env bash
# FP8 training on one GPU (issue 21): GPT-2 124M for ITERS iterations on the bundled corpus in
# bf16 and in FP8 (--fp8-format hybrid: delayed with Megatron's usual history of 1024 and max,
# delayed with the default history of 1, and tensorwise) through
# `troupe train`, and a PyTorch reference in the same command (bench/fp8_torch_reference.py:
# torch._scaled_mm linears with tensorwise scaling, and the same model in bf16). Prints each run's
# first and last logged loss and tokens/s (ours: the mean iteration time of the last three log
# lines, past the warm-up), and the ratios against our bf16 and against PyTorch's FP8.
# Usage (repo root, after `source .devdeps/env.sh`): bench/fp8_train.sh [BUILD_DIR] [ITERS] [MBS] [MODEL]
# MODEL: gpt2-124m (default) or gpt2-350m; TORCH=0 skips the PyTorch reference.
# TORCH_COMPILE=0 runs the reference eager; RUNS="bf16 fp8-tensorwise" picks our runs.
# SEEDS="1234 1 2" instead runs each of our runs once per seed (--seed: weights, dropout and data
# order) with a validation of 20 iterations at the end, and prints each run's validation losses
# with their mean and spread: the seed-to-seed noise of bf16 beside the FP8 recipes' (no PyTorch).
set -uo pipefail
build=${1:-build}
iters=${2:-500}
mbs=${3:-16}
model=${4:-gpt2-124m}
case "$model" in
  gpt2-124m) torch_shape=(--layers 12 --heads 12 --dim 768) ;;
  gpt2-350m) torch_shape=(--layers 24 --heads 16 --dim 1024) ;;
  *) echo "fp8_train.sh: MODEL must be gpt2-124m or gpt2-350m, got $model"; exit 2 ;;
esac
troupe=$build/apps/troupe
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp}/fp8
mkdir -p "$out"
tokens_per_iter=$((mbs * 1024))

"$troupe" preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$out/moby" \
    --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --append-eod > "$out/pre.log" 2>&1 ||
    { echo "preprocess failed:"; tail -3 "$out/pre.log"; }
common=(--data-path "$out/moby_text_document" --split 98,2,0 --vocab-file assets/gpt2/gpt2-vocab.json
        --merge-file assets/gpt2/gpt2-merges.txt --model "$model" --micro-batch-size "$mbs"
        --global-batch-size "$mbs" --train-iters "$iters" --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine
        --lr-warmup-iters 20 --bf16 --log-interval 50 --eval-iters "$([ -n "${SEEDS:-}" ] && echo 20 || echo 0)"
        --sample-tokens 0)
compile=(--compile)
[ "${TORCH_COMPILE:-1}" = 0 ] && compile=()

# The mean of `troupe train`'s "elapsed time per iteration (ms)" over its last three log lines -> tokens/s.
troupe_tokens_per_s() {  # log
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | tail -3 | grep -o '[0-9.]*$' |
    awk -v t="$tokens_per_iter" '{ s += $1; n++ } END { if (n) printf "%.0f", t * 1000 / (s / n); else print 0 }'
}
loss_at() {  # log head|tail
  grep -o 'lm loss: [0-9.E+-]*' "$1" | "$2" -1 | awk '{print $3}'
}

declare -A flags
flags[bf16]=""
flags[fp8-delayed]="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
flags[fp8-delayed-h1]="--fp8-format hybrid --fp8-recipe delayed"
flags[fp8-tensorwise]="--fp8-format hybrid --fp8-recipe tensorwise"
rows=()
bf16_tps=0
runs=${RUNS:-bf16 fp8-delayed fp8-delayed-h1 fp8-tensorwise}

if [ -n "${SEEDS:-}" ]; then
  echo "==== $model, $iters iterations of $mbs x 1024 tokens on Moby-Dick: validation loss (20 iterations) per seed"
  printf '%-16s %-28s %8s %8s %8s\n' run "losses (seeds: $SEEDS)" mean min max
  for name in $runs; do
    losses=()
    for seed in $SEEDS; do
      log="$out/$name-seed$seed.log"
      # shellcheck disable=SC2086
      "$troupe" train "${common[@]}" ${flags[$name]} --seed "$seed" > "$log" 2>&1 ||
        { echo "$name seed $seed failed:"; tail -5 "$log"; }
      losses+=("$(grep -o 'lm loss value: [0-9.E+-]*' "$log" | tail -1 | awk '{printf "%.4f", $4}')")
    done
    printf '%s\n' "${losses[@]}" | awk -v n="$name" '
      { v[NR] = $1; s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1; all = all " " $1 }
      END { printf "%-16s %-28s %8.4f %8.4f %8.4f\n", n, all, s / NR, lo, hi }'
  done
  exit 0
fi
for name in $runs; do
  # shellcheck disable=SC2086
  "$troupe" train "${common[@]}" ${flags[$name]} > "$out/$name.log" 2>&1 || { echo "$name failed:"; tail -5 "$out/$name.log"; }
  tps=$(troupe_tokens_per_s "$out/$name.log")
  [ "$name" = bf16 ] && bf16_tps=$tps
  rows+=("$(printf '%-22s %9s %9s %10s' "troupe $name" "$(loss_at "$out/$name.log" head)" "$(loss_at "$out/$name.log" tail)" "$tps")")
done
torch_fp8_tps=0
torch_modes="bf16 fp8"
[ "${TORCH:-1}" = 0 ] && torch_modes=""
for mode in $torch_modes; do
  python3 bench/fp8_torch_reference.py --data "$out/moby_text_document.bin" --mode "$mode" --batch "$mbs" \
      --iters "$iters" "${torch_shape[@]}" "${compile[@]}" > "$out/torch_$mode.log" 2>&1 || { echo "torch $mode failed:"; tail -5 "$out/torch_$mode.log"; }
  res=$(grep '^RESULT' "$out/torch_$mode.log")
  tps=$(echo "$res" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/' | awk '{printf "%.0f", $1}')
  first=$(echo "$res" | sed 's/.*"first_loss": \([0-9.]*\).*/\1/')
  last=$(echo "$res" | sed 's/.*"last_loss": \([0-9.]*\).*/\1/')
  [ "$mode" = fp8 ] && torch_fp8_tps=$tps
  rows+=("$(printf '%-22s %9s %9s %10s' "torch $mode" "${first:-?}" "${last:-?}" "${tps:-0}")")
done
echo "==== $model, $iters iterations of $mbs x 1024 tokens on Moby-Dick (hybrid FP8)"
printf '%-22s %9s %9s %10s\n' run first_loss last_loss tokens/s
printf '%s\n' "${rows[@]}"
for name in $runs; do
  [ "$name" = bf16 ] && continue
  tps=$(troupe_tokens_per_s "$out/$name.log")
  awk -v n="$name" -v t="$tps" -v b="$bf16_tps" -v r="$torch_fp8_tps" \
    'BEGIN { printf "troupe %s: %.3fx our bf16, %.3fx torch fp8\n", n, (b > 0 ? t / b : 0), (r > 0 ? t / r : 0) }'
done
