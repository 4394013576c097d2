#!/usr/bin/env bash
# GPT-2 124M and 350M training throughput, ours against PyTorch (torch.compile) in the same
# command on the same GPU: `troupe train` (what users run) and `train_bench` (the same model
# without the actor runtime) at several micro-batch sizes, so each side can be taken at its best,
# with MFU over the bf16 matmul peak measured by the baseline's peak.py. Needs the baseline
# scripts copied into .baselines/ (peak.py, train_gpt2_torch.py: scripts/device_pack.sh does).
# Optional: PROFILE=1 prints train_bench's per-op profile of each model at its first batch.
# TORCH=0 skips the PyTorch reference (ours only: `troupe train` against `train_bench`, the
# runtime's overhead); MODELS="gpt2-124m" picks the models, BATCHES_124M="16 32 64" and
# BATCHES_350M their micro batches.
# Usage (repo root, after `source .devdeps/env.sh`): bench/compare_train_torch.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp}/compare_train
mkdir -p "$out"
peak=$(python3 .baselines/peak.py | grep '"kind": "matmul"' | sed 's/.*"tflops_median": \([0-9.]*\).*/\1/')
echo "bf16 matmul peak: ${peak} TFLOP/s"
vocab=(--vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt)
rows=()

# The mean of `troupe train`'s "elapsed time per iteration (ms)" over its last three log lines
# (the first 20 iterations are warm-up) -> tokens/s.
troupe_tokens_per_s() {  # log batch
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | tail -3 | grep -o '[0-9.]*$' |
    awk -v b="$2" '{ s += $1; n++ } END { if (n) printf "%.0f", b * 1024 * 1000 / (s / n); else print 0 }'
}

run_model() {  # name layers heads dim batch...
  local name=$1 L=$2 H=$3 D=$4
  shift 4
  local first=1
  for B in "$@"; do
    local prof=()
    [ "${PROFILE:-0}" = 1 ] && [ $first = 1 ] && prof=(--profile)
    first=0
    "$build/bench/train_bench" --model "$name" --mock-data --micro-batch-size "$B" --train-iters 40 --log-interval 10 \
        --timing-warmup 10 --peak-tflops "$peak" --sample-tokens 0 --eval-iters 0 "${prof[@]}" > "$out/bench_${name}_$B.log" 2>&1
    [ ${#prof[@]} -gt 0 ] && sed -n '/profile/,$p' "$out/bench_${name}_$B.log" | head -60
    local ours_bench
    ours_bench=$(grep '^RESULT' "$out/bench_${name}_$B.log" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/')
    "$build/apps/troupe" train --model "$name" --bf16 --micro-batch-size "$B" --global-batch-size "$B" --mock-data \
        --train-iters 50 --eval-iters 0 --log-interval 10 "${vocab[@]}" > "$out/troupe_${name}_$B.log" 2>&1
    local ours_cli
    ours_cli=$(troupe_tokens_per_s "$out/troupe_${name}_$B.log" "$B")
    local ref=0
    if [ "${TORCH:-1}" != 0 ]; then
      python3 .baselines/train_gpt2_torch.py --layers "$L" --heads "$H" --dim "$D" --batch "$B" --compile \
          --peak "$peak" > "$out/torch_${name}_$B.log" 2>&1
      ref=$(grep '^RESULT' "$out/torch_${name}_$B.log" | sed 's/.*"tokens_per_s_wall": \([0-9.]*\).*/\1/')
    fi
    rows+=("$(awk -v m="$name" -v b="$B" -v c="${ours_cli:-0}" -v t="${ours_bench:-0}" -v r="${ref:-0}" \
      'BEGIN { printf "%-10s %3d %10.0f %10.0f %10.0f %7.3f %7.3f %8.4f", m, b, c, t, r, (r > 0 ? c / r : 0), (r > 0 ? t / r : 0), (t > 0 ? c / t : 0) }')")
  done
}
models=${MODELS:-gpt2-124m gpt2-350m}
[[ " $models " == *" gpt2-124m "* ]] && run_model gpt2-124m 12 12 768 ${BATCHES_124M:-32 64}
[[ " $models " == *" gpt2-350m "* ]] && run_model gpt2-350m 24 16 1024 ${BATCHES_350M:-16 32}
echo "==== summary (tokens/s; ratios against torch.compile at the same micro-batch; cli/bench: troupe train over train_bench)"
printf '%-10s %3s %10s %10s %10s %7s %7s %8s\n' model mbs troupe bench torch cli/t bench/t cli/bench
printf '%s\n' "${rows[@]}"
