# What the MoE benchmarks share (moe_train.sh, moe_all_to_all_overlap.sh): the bundled corpus
# preprocessed, the small Llama body both train, the DeepSeek-like MoE flags, and a number read
# back from a log. Sourced, not run; needs $troupe and $out.

# moe_preprocess: Moby-Dick tokenized under $out/moby_text_document.
moe_preprocess() {
  "$troupe" preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$out/moby" \
      --vocab-file assets/gpt2/gpt2-vocab.json --merge-file assets/gpt2/gpt2-merges.txt --append-eod > "$out/pre.log" 2>&1 ||
      { echo "preprocess failed:"; tail -3 "$out/pre.log"; }
}

# moe_body ITERS MBS: the data and the dense body (8 layers, hidden 512, seq 512, global batch 32), bf16.
moe_body() {
  echo --data-path "$out/moby_text_document" --split 98,2,0 --vocab-file assets/gpt2/gpt2-vocab.json \
    --merge-file assets/gpt2/gpt2-merges.txt --model llama-tiny --num-layers 8 --hidden-size 512 \
    --num-attention-heads 8 --num-query-groups 2 --seq-length 512 --max-position-embeddings 512 \
    --disable-bias-linear --micro-batch-size "$2" --global-batch-size 32 --train-iters "$1" --bf16 --eval-iters 0 \
    --moe-aux-loss-coeff 1e-2
}

# The MoE shapes: Mixtral-like (8 experts, top-2) and DeepSeek-like (64 fine-grained experts,
# top-6, a shared expert, sigmoid router with the expert bias).
MOE_MIXTRAL="--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024"
MOE_DEEPSEEK="--num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 512
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-topk-scaling-factor 2.5"

# The mean of the last three log lines' value of `what` (a number follows it), or empty.
last_three_mean() {  # log what
  grep -o "$2 [0-9.]*" "$1" | tail -3 | grep -o '[0-9.]*$' | awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }'
}
