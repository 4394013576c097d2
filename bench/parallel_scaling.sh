#!/usr/bin/env bash
# Tensor and data parallelism on one node's GPUs: GPT-2 124M, 350M and a 1.3B GPT (GPT-3 XL
# shape) trained on mock data with one GPU, DP=4 (gradient buckets reduced during backward,
# with and without the distributed optimizer, and without overlap), TP=2 x DP=2, TP=4 and
# TP=2 x PP=2 (sequence parallel wherever TP > 1). Each GPU gets the same work as the one-GPU
# run (micro batch B per replica). Prints tokens/s per GPU, TFLOP/s per GPU, scaling
# efficiency against one GPU, and the share of the data-parallel reduction hidden behind
# backward: 1 - (t_overlap - t_1gpu) / (t_no_overlap - t_1gpu) per iteration.
# Memory: the model state per parameter on the first device (ZeRO-1 arithmetic: bf16 parameters
# 2 + f32 gradients 4 + f32 master and Adam moments 12 / DP bytes) and the device memory in use.
# With --torch, PyTorch DDP + torch.compile GPT-2 124M (../shared/baselines/multi_gpu.py,
# carried as .baselines/) runs first on 1 and on N GPUs, in the same command.
# Usage (repo root, after `source .devdeps/env.sh`): bench/parallel_scaling.sh [--torch] BUILD_DIR MODEL...
# MODEL: 124m, 350m, 1.3b.
set -uo pipefail
source "$(dirname "$0")/scaling_lib.sh"
torch=0
if [ "${1:-}" = "--torch" ]; then torch=1; shift; fi
build=${1:?usage: parallel_scaling.sh [--torch] BUILD_DIR MODEL...}
shift
troupe=$build/apps/troupe
gpus=$(nvidia-smi -L | wc -l)
out=${OUT:-/tmp}/parallel
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"

if [ "$torch" = 1 ]; then
  for n in 1 "$gpus"; do
    python3 -m torch.distributed.run --standalone --nproc_per_node "$n" .baselines/multi_gpu.py --ddp-batch 16 \
        > "$out/torch_ddp_$n.log" 2>&1
    grep RESULT "$out/torch_ddp_$n.log" | grep ddp | sed "s/^/torch x$n /" | tee -a "$summary"
  done
fi

run() {  # name model_args mbs micro_per_replica T P D extra...
  local name=$1 margs=$2 mbs=$3 acc=$4 T=$5 P=$6 D=$7
  shift 7
  local n=$((T * P * D)) gbs=$((mbs * acc * D))
  [ "$n" -le "$gpus" ] || return 0
  # shellcheck disable=SC2086
  "$troupe" train $margs --mock-data --vocab-size 50257 --bf16 --micro-batch-size "$mbs" --global-batch-size "$gbs" \
      --train-iters 20 --log-interval 10 --eval-iters 0 --lr 1e-4 --tensor-model-parallel-size "$T" \
      --pipeline-model-parallel-size "$P" --devices "$n" "$@" > "$out/$name.log" 2>&1
  local ms
  ms=$(ms_of "$out/$name.log")
  if [ -z "$ms" ]; then
    echo "$name FAILED: $(tail -2 "$out/$name.log" | tr '\n' ' ')" | tee -a "$summary"
    return 0
  fi
  echo "$name $n $gbs $ms" >> "$out/runs.txt"
}

: > "$out/runs.txt"
for model in "$@"; do
  case $model in
    124m) margs="--model gpt2-124m"; mbs=16 ;;
    350m) margs="--model gpt2-350m"; mbs=8 ;;
    1.3b) margs="--model gpt2-124m --num-layers 24 --hidden-size 2048 --num-attention-heads 16"; mbs=4 ;;
    *) echo "unknown model $model"; exit 2 ;;
  esac
  run "$model-1gpu" "$margs" $mbs 1 1 1 1
  run "$model-dp4" "$margs" $mbs 1 1 1 4 --overlap-grad-reduce
  run "$model-dp4-distopt" "$margs" $mbs 1 1 1 4 --overlap-grad-reduce --use-distributed-optimizer
  for b in 10000000 4000000; do  # smaller buckets start reducing earlier in backward
    run "$model-dp4-b$((b / 1000000))m" "$margs" $mbs 1 1 1 4 --overlap-grad-reduce --ddp-bucket-size $b
    run "$model-dp4-distopt-b$((b / 1000000))m" "$margs" $mbs 1 1 1 4 --overlap-grad-reduce --use-distributed-optimizer \
        --ddp-bucket-size $b
  done
  run "$model-dp4-nooverlap" "$margs" $mbs 1 1 1 4
  run "$model-tp2dp2" "$margs" $mbs 1 2 1 2 --sequence-parallel --overlap-grad-reduce
  run "$model-tp4" "$margs" $mbs 1 4 1 1 --sequence-parallel
  run "$model-tp2pp2" "$margs" $mbs 4 2 2 1 --sequence-parallel
done

echo "==== per GPU (tokens/s, TFLOP/s), scaling efficiency against one GPU of the same model" | tee -a "$summary"
while read -r name n gbs ms; do
  model=${name%%-*}
  log=$out/$name.log
  flops=$(flops_per_token "$log")
  base=$(awk -v m="$model-1gpu" '$1 == m {print $3 * 1024 / ($4 / 1000)}' "$out/runs.txt")  # tokens/s
  noov=$(awk -v m="$model-dp4-nooverlap" '$1 == m {print $4}' "$out/runs.txt")
  base_ms=$(awk -v m="$model-1gpu" '$1 == m {print $4}' "$out/runs.txt")
  awk -v name="$name" -v n="$n" -v gbs="$gbs" -v ms="$ms" -v base="$base" -v base_ms="$base_ms" -v noov="$noov" \
      -v flops="$flops" 'BEGIN {
    tps = gbs * 1024 / (ms / 1000) / n;
    line = sprintf("%-22s %d GPU  %7.1f ms/it  %9.0f tokens/s/GPU  %6.1f TFLOP/s/GPU", name, n, ms, tps, tps * flops / 1e12);
    if (base > 0 && name !~ /1gpu$/) line = line sprintf("  efficiency %5.1f%%", 100 * tps / base);
    # dp4 runs one microbatch per GPU like the one-GPU run: the extra time is the exposed reduction.
    if (name ~ /-dp4(-b[0-9]+m)?$/ && noov > base_ms && base_ms > 0)
      line = line sprintf("  reduction hidden %5.1f%%", 100 * (1 - (ms - base_ms) / (noov - base_ms)));
    print line }' | tee -a "$summary"
  memory_of "$log" |
      awk '{printf "    model state %s bytes/parameter on the first device, %s GiB in use\n", $1, $2}' | tee -a "$summary"
done < "$out/runs.txt"
