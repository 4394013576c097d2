#!/usr/bin/env bash
# The main job: installs what is missing, builds, tokenizes the bundled Moby Dick into a
# Megatron indexed dataset, then `troupe train`s a small GPT on it (GPT-2 124M in bf16 on a
# GPU if there is one, a tiny GPT-2 on CPU devices otherwise) and prints a text sample.
# Extra arguments go to `troupe train` (they override the defaults below).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
data=build/quickstart
mkdir -p "$data"
if [ ! -f "$data/moby_text_document.idx" ]; then
  build/apps/troupe preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$data/moby" \
      --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --append-eod --quiet
fi
common=(--data-path "$data/moby_text_document" --split 969,30,1 --data-cache-path "$data/cache"
        --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt
        --eval-interval 50 --eval-iters 4 --log-interval 10 --sample-tokens 64 --prompt "Call me Ishmael.")
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  exec build/apps/troupe train "${common[@]}" --model gpt2-124m --bf16 --micro-batch-size 16 --train-iters 60 \
      --lr 6e-4 --min-lr 6e-5 --lr-warmup-iters 6 "$@"
else
  exec build/apps/troupe train "${common[@]}" --model gpt2-tiny --device cpu --micro-batch-size 8 --train-iters 200 \
      --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 20 "$@"
fi
