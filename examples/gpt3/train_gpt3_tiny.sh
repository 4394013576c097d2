#!/bin/bash
# Troupe's form of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh: the same flags,
# at a size CPU devices train in seconds, on random tokens (--mock-data). Megatron's 175B shape is
# in the comments; give real data with --data-path and a tokenizer (docs/train.md).
#
#   examples/gpt3/train_gpt3_tiny.sh [TROUPE_BINARY] [extra troupe train flags...]
#
# TROUPE_EXAMPLE_ITERS shrinks the run (the tests use 2 iterations).
set -euo pipefail
TROUPE=${1:-troupe}
shift || true
ITERS=${TROUPE_EXAMPLE_ITERS:-50}

GPT_MODEL_ARGS=(
    --num-layers 4                  # 175B: 96
    --hidden-size 64                # 175B: 12288
    --num-attention-heads 4         # 175B: 96
    --seq-length 64                 # 175B: 2048
    --max-position-embeddings 64    # 175B: 2048
    --attention-backend auto        # no effect in Troupe (a note says so)
)

TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size 4           # 175B: 1536 with --rampup-batch-size (not implemented)
    --train-iters "$ITERS"
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --lr 6.0e-4
    --lr-decay-style cosine
    --min-lr 6.0e-5
    --lr-warmup-fraction .1
    --lr-decay-iters "$ITERS"
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1  # 175B: 8
    --pipeline-model-parallel-size 2  # 175B: 16
    --device cpu
)

DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 1024
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-interval 1000
    --eval-iters 2
    --log-throughput
)

exec "$TROUPE" train \
    "${GPT_MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}" \
    "$@"
