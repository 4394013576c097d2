#!/usr/bin/env bash
# GPT-2 124M and 350M training throughput, ours against PyTorch (torch.compile) in the same
# command on the same GPU, with MFU over the bf16 matmul peak measured by the baseline's
# peak.py. Needs the baseline scripts copied into .baselines/ (peak.py, train_gpt2_torch.py).
# Usage (repo root, after `source .devdeps/env.sh`): bench/compare_train_torch.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
export PYTHONUNBUFFERED=1
peak=$(python3 .baselines/peak.py | grep '"kind": "matmul"' | sed 's/.*"tflops_median": \([0-9.]*\).*/\1/')
echo "bf16 matmul peak: ${peak} TFLOP/s"
declare -A ours torch
run_pair() {  # name layers heads dim batch
  local name=$1 L=$2 H=$3 D=$4 B=$5
  "$build/bench/train_bench" --model "$name" --mock-data --micro-batch-size "$B" --train-iters 40 --log-interval 10 \
      --timing-warmup 10 --peak-tflops "$peak" --sample-tokens 0 --eval-iters 0 2>&1 | tee "/tmp/ours_$name.log"
  ours[$name]=$(grep '^RESULT' "/tmp/ours_$name.log" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/')
  python3 .baselines/train_gpt2_torch.py --layers "$L" --heads "$H" --dim "$D" --batch "$B" --compile \
      --peak "$peak" 2>&1 | tee "/tmp/torch_$name.log" | grep RESULT
  torch[$name]=$(grep '^RESULT' "/tmp/torch_$name.log" | sed 's/.*"tokens_per_s_wall": \([0-9.]*\).*/\1/')
}
run_pair gpt2-124m 12 12 768 16
run_pair gpt2-350m 24 16 1024 8
echo "==== summary (tokens/s; ratio = ours / torch.compile)"
for m in gpt2-124m gpt2-350m; do
  awk -v m="$m" -v a="${ours[$m]:-0}" -v b="${torch[$m]:-0}" \
      'BEGIN { printf "%-10s ours %8.0f  torch %8.0f  ratio %.3f\n", m, a, b, (b > 0 ? a / b : 0) }'
done
