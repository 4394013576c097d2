#!/usr/bin/env bash
# Trains a GPT-2 124M for 300 iterations on the bundled corpus (bf16, on the GPU) and exports it
# as a Hugging Face folder, WORK_DIR/trained-gpt2: peaked weights, as real use sees them, for the
# GPU machine's generation checks. Logs in WORK_DIR/{train,convert}.log.
# Usage (repo root): scripts/device_train_gpt2.sh BUILD_DIR WORK_DIR
set -euo pipefail
troupe=$1/apps/troupe
work=$2
mkdir -p "$work"
"$troupe" preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$work/moby" \
  --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --append-eod --quiet
"$troupe" train --data-path "$work/moby_text_document" --data-cache-path "$work/cache" \
  --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --model gpt2-124m --bf16 \
  --micro-batch-size 16 --train-iters 300 --lr 6e-4 --min-lr 6e-5 --lr-warmup-iters 30 --log-interval 100 \
  --save "$work/ckpt" > "$work/train.log" 2>&1
"$troupe" convert --to hf --load "$work/ckpt" --output "$work/trained-gpt2" > "$work/convert.log" 2>&1
