#!/usr/bin/env bash
# Activation recomputation on one GPU: device memory and tokens/s of `troupe train` with and
# without each recompute mode, for a 1.3B GPT (GPT-3 XL shape) and a 7B-shaped Llama (hidden 4096,
# 32 heads, SwiGLU 11008; as many layers as LAYERS_7B, default 8) at T=4096, micro-batch 1, bf16,
# mock data. Memory is the device memory in use after the run (the caching pool holds the peak);
# "act GiB" is that minus the model state (parameters, gradients, optimizer) the run reports.
# The ratio column is tokens/s against the same model without recompute, in the same command;
# loss-diff, the largest relative difference of the logged losses from that run's (0: identical).
# Usage (repo root, after `source .devdeps/env.sh`): bench/recompute_memory.sh BUILD_DIR [MODEL...]
# MODEL: 1.3b, 7b (default both). EXTRA_ARGS adds flags to every run (e.g. --deterministic-mode:
# cuDNN's attention backward without atomics, so that recompute's losses can equal the run
# without it to the bit, as they do on the CPU).
set -uo pipefail
source "$(dirname "$0")/scaling_lib.sh"
build=${1:?usage: recompute_memory.sh BUILD_DIR [MODEL...]}
shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(1.3b 7b)
troupe=$build/apps/troupe
out=${OUT:-/tmp}/recompute
mkdir -p "$out"
seq=4096
modes=("none:"
       "selective-core_attn:--recompute-activations"
       "selective-layernorm-mlp:--recompute-granularity selective --recompute-modules layernorm mlp"
       "full-uniform-1:--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
       "full-block-half:--recompute-granularity full --recompute-method block --recompute-num-layers HALF")

printf '%-6s %-26s %9s %12s %10s %8s %8s %10s\n' model mode ms/it tokens/s GiB 'act GiB' ratio loss-diff > "$out/summary.txt"
for model in "${models[@]}"; do
  case $model in
    1.3b) layers=24; margs="--model gpt2-124m --num-layers 24 --hidden-size 2048 --num-attention-heads 16" ;;
    7b) layers=${LAYERS_7B:-8}
        margs="--model llama-tiny --num-layers $layers --hidden-size 4096 --num-attention-heads 32 --num-query-groups 32"
        margs+=" --ffn-hidden-size 11008" ;;
    *) echo "unknown model $model"; exit 2 ;;
  esac
  base=""
  for entry in "${modes[@]}"; do
    name=${entry%%:*}
    extra=${entry#*:}
    extra=${extra//HALF/$((layers / 2))}
    log=$out/$model-$name.log
    # shellcheck disable=SC2086
    "$troupe" train $margs --seq-length $seq --max-position-embeddings $seq --mock-data --vocab-size 50257 --bf16 \
        --micro-batch-size 1 --global-batch-size 4 --train-iters 6 --log-interval 3 --eval-iters 0 --lr 1e-4 \
        $extra ${EXTRA_ARGS:-} > "$log" 2>&1
    ms=$(ms_of "$log")
    if [ -z "$ms" ]; then
      printf '%-6s %-26s FAILED: %s\n' "$model" "$name" "$(tail -1 "$log")" >> "$out/summary.txt"
      continue
    fi
    gib=$(memory_of "$log" | awk '{print $2}')
    state=$(grep -o 'parameters [0-9.]* GiB, gradients [0-9.]* GiB, optimizer state [0-9.]* GiB' "$log" | head -1 |
            awk '{print $2 + $5 + $9}')
    act=$(awk -v g="${gib:-0}" -v s="${state:-0}" 'BEGIN {printf "%.2f", g - s}')
    tps=$(awk -v ms="$ms" -v t=$seq 'BEGIN {printf "%.0f", 4 * t / (ms / 1000)}')
    losses_of "$log" > "$out/$model-$name.losses"
    [ -n "$base" ] || { base=$tps; base_losses=$out/$model-$name.losses; }
    printf '%-6s %-26s %9.1f %12s %10s %8s %8.3f %10s\n' "$model" "$name" "$ms" "$tps" "${gib:--}" "$act" \
        "$(awk -v a="$tps" -v b="$base" 'BEGIN {print a / b}')" \
        "$(max_rel_diff "$out/$model-$name.losses" "$base_losses" | awk '{print $1}')" >> "$out/summary.txt"
  done
done
cat "$out/summary.txt"
