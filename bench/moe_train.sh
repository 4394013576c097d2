#!/usr/bin/env bash
# Mixture-of-experts training on one GPU, end to end on the bundled corpus: a Mixtral-shaped small
# model (8 experts, top-2) and a DeepSeek-shaped one (64 fine-grained experts, top-6, 2 shared
# experts' width, sigmoid router with the expert bias), bf16; prints the first and last logged
# loss and tokens/s of each. (No PyTorch reference yet: issue 20 asks for one.)
# Usage (repo root, after `source .devdeps/env.sh`): bench/moe_train.sh [BUILD_DIR] [ITERS]
set -uo pipefail
build=${1:-build}
iters=${2:-200}
troupe=$build/apps/troupe
out=${OUT:-/tmp}/moe
mkdir -p "$out"
"$troupe" preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$out/moby" \
    --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --append-eod > "$out/pre.log" 2>&1 ||
    { tail -3 "$out/pre.log"; exit 1; }
common=(--data-path "$out/moby_text_document" --split 98,2,0 --vocab-file assets/gpt2/gpt2-vocab.json
        --merge-file assets/gpt2/gpt2-merges.txt --model llama-tiny --num-layers 8 --hidden-size 512
        --num-attention-heads 8 --num-query-groups 2 --seq-length 512 --max-position-embeddings 512
        --disable-bias-linear --micro-batch-size 8 --global-batch-size 32 --train-iters "$iters" --lr 1e-3
        --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --bf16 --log-interval 20 --eval-iters 0
        --moe-aux-loss-coeff 1e-2)
declare -A shape
shape[mixtral]="--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024"
shape[deepseek]="--num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 512
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-topk-scaling-factor 2.5"
for name in mixtral deepseek; do
  # shellcheck disable=SC2086
  "$troupe" train "${common[@]}" ${shape[$name]} > "$out/$name.log" 2>&1 || { echo "$name failed:"; tail -5 "$out/$name.log"; }
done
echo "==== MoE training (one GPU, bf16, $iters iterations)"
for name in mixtral deepseek; do
  first=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$name.log" | head -1 | awk '{print $3}')
  last=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$name.log" | tail -1 | awk '{print $3}')
  tps=$(grep '^summary' "$out/$name.log" | sed 's/.*(\([0-9]*\) tokens\/s).*/\1/')
  lb=$(grep -o 'load_balancing_loss: [0-9.E+-]*' "$out/$name.log" | tail -1 | awk '{print $2}')
  printf '%-9s loss %s -> %s  load_balancing_loss %s  %s tokens/s\n' "$name" "${first:--}" "${last:--}" "${lb:--}" "${tps:--}"
done
