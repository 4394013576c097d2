#!/usr/bin/env bash
# Checkpoint checks on the GPU machine (nothing is built there): the training stall of
# synchronous and asynchronous saves for GPT-2 124M and 350M against the iteration time, the
# write bandwidth against the disk's, bit-identical resume on the GPU, and `transformers`
# loading our HF export with matching logits. Prints a table last.
# Usage (repo root, after `source .devdeps/env.sh`): scripts/device_checkpoint_check.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
T=$build/apps/troupe
work=${WORK:-/tmp/ckpt_check}
rm -rf "$work"; mkdir -p "$work"
vocab=assets/gpt2/gpt2-vocab.json merges=assets/gpt2/gpt2-merges.txt
$T preprocess --input assets/corpora/moby-dick.jsonl --output-prefix "$work/moby" --vocab-file $vocab \
   --merge-file $merges --append-eod --quiet
common=(--data-path "$work/moby_text_document" --split 969,30,1 --data-cache-path "$work/cache" --vocab-file $vocab
        --merge-file $merges --bf16 --micro-batch-size 4 --global-batch-size 16 --eval-iters 0 --lr 6e-4
        --lr-warmup-iters 5)
summary=()
# Disk: sequential write with fsync, what a checkpoint does.
disk=$(dd if=/dev/zero of="$work/dd" bs=16M count=128 conv=fsync 2>&1 | tail -1); rm -f "$work/dd"
summary+=("disk (dd 2 GiB, conv=fsync): $disk")
ms_per_iter() { grep -o "elapsed time per iteration (ms): [0-9.]*" "$1" | awk '{s+=$NF; n++} END {if (n) printf "%.1f", s/n}'; }
for model in gpt2-124m gpt2-350m; do
  $T train "${common[@]}" --model $model --train-iters 40 --log-interval 10 > "$work/$model-none.log" 2>&1
  $T train "${common[@]}" --model $model --train-iters 40 --log-interval 10 --save "$work/$model-sync" \
     --save-interval 10 > "$work/$model-sync.log" 2>&1
  $T train "${common[@]}" --model $model --train-iters 40 --log-interval 10 --save "$work/$model-async" \
     --save-interval 10 --async-save > "$work/$model-async.log" 2>&1
  for mode in sync async; do
    saves=$(grep "successfully saved" "$work/$model-$mode.log" | head -3 | sed -E 's/.*stalled ([0-9.]+) s, written in ([0-9.]+) s \(([0-9.]+) MB\/s.*/stall \1 s write \2 s \3 MB\/s;/' | tr '\n' ' ')
    summary+=("$model $mode: ms/iter without saves $(ms_per_iter "$work/$model-none.log"), with $(ms_per_iter "$work/$model-$mode.log"); $saves")
  done
  tail -3 "$work/$model-async.log"
done
# Bit-identical resume on the GPU: 20 straight (twice: is the run itself deterministic?) vs
# 10 + save + 10, in each layout the machine's GPUs allow.
gpus=$(nvidia-smi -L | wc -l)
layouts=("--devices 1")
if [ "$gpus" -ge 2 ]; then
  layouts+=("--tensor-model-parallel-size 2 --sequence-parallel --devices 2"
            "--devices 2 --use-distributed-optimizer --overlap-grad-reduce" "--pipeline-model-parallel-size 2 --devices 2")
fi
losses() { grep -o "iteration *[0-9]*/.*lm loss: [0-9.E+-]*" "$1" | sed -E 's/iteration *([0-9]+)\/.*lm loss: (.*)/\1 \2/' | awk '$1 > 10'; }
# "identical", or the largest relative difference of the losses of iterations 11-20.
same() {
  if [ -z "$(losses "$1")" ]; then echo "NO LOSSES"; return; fi
  if diff <(losses "$1") <(losses "$2") > /dev/null; then echo identical; return; fi
  paste <(losses "$1") <(losses "$2") | awk '{d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r} END {printf "differ (max rel %.1e)", m}'
}
for i in "${!layouts[@]}"; do
  # shellcheck disable=SC2206
  l=(${layouts[$i]})
  r=(--model gpt2-124m --train-iters 20 --log-interval 1 "${l[@]}")
  $T train "${common[@]}" "${r[@]}" > "$work/straight1-$i.log" 2>&1
  $T train "${common[@]}" "${r[@]}" > "$work/straight2-$i.log" 2>&1
  $T train "${common[@]}" "${r[@]}" --save "$work/resume-$i" --exit-interval 10 > "$work/first-$i.log" 2>&1
  $T train "${common[@]}" "${r[@]}" --load "$work/resume-$i" > "$work/second-$i.log" 2>&1
  summary+=("gpu ${layouts[$i]}: two straight runs $(same "$work/straight1-$i.log" "$work/straight2-$i.log"), straight vs 10 + save + resume $(same "$work/straight1-$i.log" "$work/second-$i.log") (iterations 11-20)")
done
paste <(losses "$work/straight1-0.log") <(losses "$work/second-0.log") | head -4
# HF export of the 124M checkpoint.
$T convert --to hf --load "$work/gpt2-124m-sync" --output "$work/hf" > "$work/convert.log" 2>&1 || cat "$work/convert.log"
python3 scripts/check_hf_export.py --tool "$build/bench/hf_parity_tool" --checkpoint "$work/gpt2-124m-sync" \
   --hf "$work/hf" 2>&1 | tee "$work/export.log" | tail -4
summary+=("$(grep '^export' "$work/export.log" | tr '\n' ';')")
echo "==== summary"
printf '%s\n' "${summary[@]}"
