#!/bin/bash
# Troupe's form of Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh, at a size
# CPU devices could train on random tokens (--mock-data).
#
# Four experts, top-2, with the load-balancing loss, over two pipeline stages (expert
# parallelism is not implemented yet: --expert-model-parallel-size stays 1).
# tests/apps/megatron_flags_test.cpp runs it for two iterations.
#
#   examples/mixtral/train_mixtral_tiny.sh [TROUPE_BINARY] [extra troupe train flags...]
set -euo pipefail
TROUPE=${1:-troupe}
shift || true
ITERS=${TROUPE_EXAMPLE_ITERS:-50}

MODEL_ARGS=(
    --use-mcore-models
    --disable-bias-linear
    --seq-length 64                 # 8x7B: 4096
    --max-position-embeddings 64    # 8x7B: 32768
    --num-layers 2                  # 8x7B: 32
    --hidden-size 64                # 8x7B: 4096
    --ffn-hidden-size 224           # 8x7B: 14336
    --num-attention-heads 4         # 8x7B: 32
    --init-method-std 0.01
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --normalization RMSNorm
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --group-query-attention
    --num-query-groups 2            # 8x7B: 8
    --no-masked-softmax-fusion
    --no-position-embedding
    --rotary-base 1000000
)

MOE_ARGS=(
    --num-experts 4                 # 8x7B: 8
    --moe-router-topk 2
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
    --overlap-param-gather
    --overlap-grad-reduce
)

DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer  # 8x7B: Llama2Tokenizer --tokenizer-model tokenizer.model
    --vocab-size 1024
    --split 99990,8,2
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 4           # 8x7B: 256
    --lr 1e-4
    --train-iters "$ITERS"
    --lr-decay-iters "$ITERS"
    --lr-decay-style cosine
    --min-lr 1.0e-5
    --weight-decay 0.1
    --lr-warmup-iters 1
    --clip-grad 1.0
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 2  # 8x7B: 4
    --expert-model-parallel-size 1  # 8x7B: 8
    --use-distributed-optimizer
    --sequence-parallel
    --device cpu
)

LOGGING_ARGS=(
    --log-interval 1
    --eval-interval 1000
    --eval-iters 2
)

exec "$TROUPE" train \
    "${MODEL_ARGS[@]}" \
    "${MOE_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${LOGGING_ARGS[@]}" \
    "$@"
