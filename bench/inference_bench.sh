#!/usr/bin/env bash
# Inference on one GPU against HF transformers, in one command: for GPT-2 124M and 350M
# (random weights), decode ms/step at batch 1, 16 and 64 through the engine (bench/decode_bench:
# whole engine steps, CUDA graphs, bf16; infer_hf.py's method: prompt 128, 128 new tokens,
# prefill removed), then throughput under a Poisson load through `troupe serve` on loopback
# (bench/serve_load_test: streamed requests, output tokens/s, time to first token and time per
# output token p50/p99), then ../shared/baselines/infer_hf.py (carried as .baselines/ by
# scripts/device_pack.sh; HF static KV cache, GPT-2 124M only) at the same batches. Prints a
# table with our/HF ratios last (for 350M there is no HF number). With 2 or more GPUs it also
# times a tensor-parallel replica over two GPUs (decode_bench --tensor-model-parallel-size 2).
# Usage (repo root, after `source .devdeps/env.sh`): bench/inference_bench.sh [BUILD_DIR] [RATE...]
# RATE: Poisson arrivals per second of a load run (default: 50, well below saturation, and 250,
# beyond it: the queue fills and some requests get 503).
set -uo pipefail
build=${1:-build}
shift || true
rates=${*:-50 250}
out=${OUT:-/tmp}/inference
mkdir -p "$out"
export TROUPE_BINARY=$build/apps/troupe TROUPE_SOURCE_DIR=$PWD

gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for m in gpt2-124m gpt2-350m; do
  "$build/bench/decode_bench" --model "$m" --batches 1,16,64 --prompt 128 --new 128 2>&1 | tee "$out/decode_$m.log"
  # With two GPUs, also one tensor-parallel replica over both (beside the issue's one-GPU table).
  [ "$gpus" -ge 2 ] && "$build/bench/decode_bench" --model "$m" --batches 1,16,64 --prompt 128 --new 128 \
      --tensor-model-parallel-size 2 2>&1 | tee "$out/decode_${m}_tp2.log"
  # Prompts of up to 100 words (~100 tokens), up to 256 new tokens, every request streamed.
  for rate in $rates; do
    "$build/bench/serve_load_test" --model "$m" --device cuda --requests 1500 --waves 1 --rate "$rate" \
        --max-prompt-words 100 --max-output 256 --stream-share 1 --greedy-share 0.5 --verify 0 --max-running 64 \
        --max-queued-requests 512 --kv-cache-gb 8 --max-rss-growth-mb 2048 2>&1 |
      sed "s/^RESULT {/RESULT {\"rate\": $rate, /" | tee "$out/load_${m}_$rate.log"
  done
done
python3 .baselines/infer_hf.py --batches 1,16,64 --static 2>&1 | tee "$out/hf.log"

echo "==== summary (ms/step: lower is better; ratio = HF / ours, above 1: we are faster)"
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def results(path):
    if not path.exists(): return []
    return [json.loads(l[7:]) for l in path.read_text().splitlines() if l.startswith("RESULT ")]
hf = {r["batch"]: r for r in results(out / "hf.log") if r.get("ok")}
print(f"{'model':10} {'batch':>5} {'ours ms/step':>12} {'HF ms/step':>10} {'ratio':>6} {'ours tok/s':>10} {'HF tok/s':>9} {'ratio':>6}")
for m in ["gpt2-124m", "gpt2-350m"]:
    for r in results(out / f"decode_{m}.log"):
        h = hf.get(r["batch"]) if m == "gpt2-124m" else None
        hm = h["ms_per_decode_step"] if h else float("nan")
        ht = h["gen_tokens_per_s"] if h else float("nan")
        print(f"{m:10} {r['batch']:>5} {r['ms_per_decode_step']:>12.3f} {hm:>10.3f} {hm / r['ms_per_decode_step']:>6.2f}"
              f" {r['gen_tokens_per_s']:>10.0f} {ht:>9.0f} {r['gen_tokens_per_s'] / ht:>6.2f}")
tp2 = [(m, r) for m in ["gpt2-124m", "gpt2-350m"] for r in results(out / f"decode_{m}_tp2.log")]
if tp2:
    print()
    print("one replica over 2 GPUs (--tensor-model-parallel-size 2) against the one-GPU run above")
    one = {(m, r["batch"]): r for m in ["gpt2-124m", "gpt2-350m"] for r in results(out / f"decode_{m}.log")}
    print(f"{'model':10} {'batch':>5} {'TP2 ms/step':>11} {'TP1 ms/step':>11} {'TP1/TP2':>7}")
    for m, r in tp2:
        o = one.get((m, r["batch"]), {}).get("ms_per_decode_step", float("nan"))
        print(f"{m:10} {r['batch']:>5} {r['ms_per_decode_step']:>11.3f} {o:>11.3f} {o / r['ms_per_decode_step']:>7.2f}")
print()
hf64 = hf.get(64, {}).get("gen_tokens_per_s", float("nan"))
print(f"Poisson load through troupe serve (HF static batch 64: {hf64:.0f} tokens/s)")
for m in ["gpt2-124m", "gpt2-350m"]:
    for r in (x for f in sorted(out.glob(f"load_{m}_*.log")) for x in results(f)):
        print(f"{m:10} rate {r['rate']}/s: ok {r['ok']} refused {r['refused']} wrong {r['wrong']}: {r['tokens_per_s']:.0f} tokens/s"
              f" (x{r['tokens_per_s'] / hf64:.2f} HF b64), TTFT p50 {r['ttft_p50_ms']:.1f} p99 {r['ttft_p99_ms']:.1f} ms,"
              f" TPOT p50 {r['tpot_p50_ms']:.2f} p99 {r['tpot_p99_ms']:.2f} ms")
PY
