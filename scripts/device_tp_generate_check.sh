#!/usr/bin/env bash
# Tensor-parallel generation on 2 GPUs against one GPU, GPT-2 124M shaped: a random model (HF
# GPT2Config()) and, unless --no-train, one trained here (300 iterations on the bundled corpus,
# exported by `troupe convert --to hf`). Each case is `troupe generate` of N prompts x M greedy
# tokens with --tensor-model-parallel-size 2 in f32 (CUDA graphs, op by op) and bf16, compared
# with the same run on one GPU (ids equal in f32; bf16 reported). Every run has a wall-clock limit
# and a short --inference-step-timeout, so a stuck group ends with the engine's error. Prints a
# table last. Usage (repo root, after `source .devdeps/env.sh`):
#   scripts/device_tp_generate_check.sh BUILD_DIR [--no-train]
set -uo pipefail
build=${1:-build}
troupe=$build/apps/troupe
work=${OUT:-/tmp}/tp_generate
mkdir -p "$work"
prompts=("Hello, my name is" "The capital of France is" "In 1492, Columbus" "def fibonacci(n):"
         "Once upon a time there was a little" "The quick brown fox jumps over the lazy dog. The quick brown fox")

python3 - "$work/random-gpt2" <<'EOF'
import shutil, sys, torch, transformers
torch.manual_seed(0)
out = sys.argv[1]
transformers.GPT2LMHeadModel(transformers.GPT2Config()).save_pretrained(out, safe_serialization=True)
shutil.copy("assets/gpt2/gpt2-vocab.json", f"{out}/vocab.json")
shutil.copy("assets/gpt2/gpt2-merges.txt", f"{out}/merges.txt")
EOF
folders=("$work/random-gpt2")

if [ "${2:-}" != "--no-train" ]; then
  start=$(date +%s)
  scripts/device_train_gpt2.sh "$build" "$work" && folders+=("$work/trained-gpt2")
  echo "training + export: $(( $(date +%s) - start )) s"; tail -2 "$work/train.log"
fi

rows=()
# case NAME FOLDER TP PROMPTS TOKENS [extra flags]: runs it; prints "rc seconds"; ids in $work/NAME.ids
run_case() {
  local name=$1 folder=$2 tp=$3 n=$4 tokens=$5; shift 5
  local args=()
  for p in "${prompts[@]:0:$n}"; do args+=(--prompt "$p"); done
  local t0=$(date +%s%N)
  NCCL_DEBUG=WARN timeout -k 5 40 "$troupe" generate --hf "$folder" --device cuda --temperature 0 --ignore-eod \
    --max-tokens "$tokens" --print-ids --tensor-model-parallel-size "$tp" --inference-step-timeout 15 "$@" \
    "${args[@]}" > "$work/$name.out" 2> "$work/$name.err"
  local rc=$?
  grep '^ids:' "$work/$name.out" > "$work/$name.ids"
  local tenths=$(( ($(date +%s%N) - t0) / 100000000 ))
  printf '%s %d.%d' "$rc" $(( tenths / 10 )) $(( tenths % 10 ))
}

for folder in "${folders[@]}"; do
  model=$(basename "$folder")
  for shape in "6 32" "2 32" "6 4"; do
    set -- $shape
    n=$1 tokens=$2
    for dtype in f32 bf16; do
      ref="$model-$n-$tokens-$dtype-tp1"
      read -r rc s <<< "$(run_case "$ref" "$folder" 1 "$n" "$tokens" --dtype "$dtype")"
      rows+=("$(printf '%-13s %2s x %-3s %-5s %-13s rc=%-4s %6ss  -' "$model" "$n" "$tokens" "$dtype" tp1 "$rc" "$s")")
      variants=("graphs:")
      [ "$dtype" = f32 ] && variants+=("no-graphs:--no-cuda-graphs")
      for v in "${variants[@]}"; do
        label=${v%%:*} flag=${v#*:}
        name="$model-$n-$tokens-$dtype-tp2-$label"
        read -r rc s <<< "$(run_case "$name" "$folder" 2 "$n" "$tokens" --dtype "$dtype" $flag)"
        if [ "$rc" = 0 ] && cmp -s "$work/$ref.ids" "$work/$name.ids"; then same=equal
        elif [ "$rc" = 0 ]; then same=DIFFERENT; else same="FAILED: $(tail -c 300 "$work/$name.err" | tr '\n' ' ')"; fi
        rows+=("$(printf '%-13s %2s x %-3s %-5s %-13s rc=%-4s %6ss  %s' "$model" "$n" "$tokens" "$dtype" "tp2-$label" "$rc" "$s" "$same")")
      done
    done
  done
done

echo "==== tensor-parallel generate (ids of TP2 against TP1 on the same dtype)"
printf '%s\n' "${rows[@]}"
