#!/bin/bash
# Troupe's form of Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh: the Llama 3 flags
# (RMSNorm, RoPE, SwiGLU, GQA, untied output, no biases), counted in samples like Megatron's,
# at a size CPU devices train in seconds on random tokens (--mock-data). Megatron's 8B values are
# in the comments; its fp8 flags are left out (fp8 is not implemented: --fp8-format is an error).
#
#   examples/llama/train_llama3_tiny.sh [TROUPE_BINARY] [extra troupe train flags...]
#
# TROUPE_EXAMPLE_ITERS shrinks the run (the tests use 2 iterations).
set -euo pipefail
TROUPE=${1:-troupe}
shift || true
ITERS=${TROUPE_EXAMPLE_ITERS:-50}
GBS=4

MODEL_ARGS=(
    --use-mcore-models              # no effect in Troupe
    --num-layers 2                  # 8B: 32
    --hidden-size 64                # 8B: 4096
    --ffn-hidden-size 224           # 8B: 14336
    --num-attention-heads 4         # 8B: 32
    --group-query-attention
    --num-query-groups 2            # 8B: 8
    --kv-channels 16                # 8B: 128
    --seq-length 64                 # 8B: 8192
    --max-position-embeddings 64    # 8B: 8192
    --position-embedding-type rope
    --rotary-base 1000000
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --normalization RMSNorm
    --swiglu
    --init-method-std 0.0134
    --attention-backend fused       # no effect in Troupe
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size $GBS        # 8B: 128
    --train-samples $((ITERS * GBS))  # 8B: 1953125000
    --lr-decay-samples $((ITERS * GBS))
    --lr-warmup-samples $GBS
    --lr 0.00015
    --min-lr 0.00001
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --cross-entropy-loss-fusion     # no effect in Troupe
    --calculate-per-token-loss      # Troupe's loss is always the per-token mean
    --manual-gc                     # no effect in Troupe
    --empty-unused-memory-level 1   # no effect in Troupe
    --exit-duration-in-mins 235
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2  # 8B: 1
    --context-parallel-size 1
    --pipeline-model-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather          # no effect in Troupe
    --device cpu
)

DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer  # 8B: HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B
    --vocab-size 1024
    --split 99,1,0
    --no-create-attention-mask-in-dataloader
    --num-workers 1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 2
    --eval-interval 100
    --log-throughput
    --distributed-timeout-minutes 60
    --ckpt-format troupe            # 8B: torch_dist, which Troupe refuses: its own format is the only one
)

exec "$TROUPE" train \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}" \
    "$@"
