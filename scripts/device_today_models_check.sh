#!/usr/bin/env bash
# Issue 19's checks on the GPU machine (nothing is built there; see scripts/device_pack.sh), in
# two parts that each fit one device call, a summary table last:
#   models  GPU tests of attention, norms and inference; HF parity of every family (logits, loss,
#           gradients, greedy generate, export round trip); the Llama 3 walk-through's export
#           against transformers (preprocess -> train TP2 x PP2 -> convert -> check_hf_export)
#   text    the HF tokenizers against Python `tokenizers` (ids, decode) and their throughput
#           ratio; the chat templates against transformers' apply_chat_template
# Usage (repo root, after `source .devdeps/env.sh`): scripts/device_today_models_check.sh BUILD models|text
set -uo pipefail
build=${1:?build dir}
part=${2:?models or text}
out=${OUT:-/tmp}
summary=()
step() {  # step NAME LIMIT_S COMMAND...: runs it, logs to $out/NAME.log, notes the exit status
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  summary+=("$(printf '%-22s exit %s' "$name" "$?")")
}
toks=(--tokenizer-model assets/tokenizers/llama3 --tokenizer-model assets/tokenizers/qwen3
      --tokenizer-model assets/tokenizers/mistral)

if [ "$part" = models ]; then
  step gpu_tests 200 ctest --test-dir "$build" --timeout 150 --output-on-failure \
    -R "attention_cuda|paged_attention_cuda|norm_cuda|inference_model_cuda|inference_tensor_parallel_cuda"
  step hf_parity 300 python3 scripts/check_hf_parity.py --tool "$build/bench/hf_parity_tool"
  w=$(mktemp -d)
  troupe=$build/apps/troupe
  step wt_preprocess 60 "$troupe" preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$w/moby" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model assets/tokenizers/llama3 --append-eod
  step wt_train 200 "$troupe" train --device cpu --devices 4 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --num-layers 4 --hidden-size 64 --num-attention-heads 4 \
    --group-query-attention --num-query-groups 2 --ffn-hidden-size 128 --seq-length 64 \
    --max-position-embeddings 256 --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 \
    --use-rope-scaling --swiglu --disable-bias-linear --untie-embeddings-and-output-weights \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model assets/tokenizers/llama3 \
    --data-path "$w/moby_text_document" --split 100,0,0 --eval-iters 0 --micro-batch-size 1 \
    --global-batch-size 2 --train-iters 20 --lr 1e-3 --log-interval 5 --save "$w/ckpt"
  step wt_convert 60 "$troupe" convert --to hf --load "$w/ckpt" --output "$w/hf"
  step wt_hf_export 120 python3 scripts/check_hf_export.py --tool "$build/bench/hf_parity_tool" \
    --checkpoint "$w/ckpt" --hf "$w/hf"
else
  step tokenizers_hf 300 python3 scripts/check_tokenizer_hf.py --tool "$build/bench/tokenize_tool" "${toks[@]}"
  step tokenizer_bench 150 "$build/bench/tokenizer_bench" --benchmark_filter='hf/|gpt2' \
    --benchmark_repetitions=3 --benchmark_out="$out/tok.json" --benchmark_out_format=json
  step tokenizers_speed 150 python3 scripts/bench_tokenizers_hf.py "${toks[@]}" --troupe-tokenizer-json "$out/tok.json"
  step chat_templates 120 python3 scripts/check_chat_template_hf.py --tool "$build/bench/chat_template_tool"
fi
echo "==== summary ($part)"
printf '%s\n' "${summary[@]}"
for f in "$out"/*.log; do echo "---- $(basename "$f") (tail)"; tail -n 12 "$f"; done
