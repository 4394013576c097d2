#!/usr/bin/env bash
# What the monitor costs training: the same `troupe train` run three ways, in turn, REPS times
# (so drift in the machine's load hits every way alike):
#   off       no monitor
#   on        --monitor-endpoint and --metrics-port, nobody attached
#   attached  the same, with a live `troupe monitor` and a /metrics scrape every second
# --log-interval 1, so every iteration publishes (the worst case; Megatron's default is 100).
# Prints each run's mean ms/iteration (from its log lines, the first tenth left out as warm-up),
# then per way the median over the repetitions and the median of the per-repetition ratios
# against off. Whole runs on a shared machine differ by several percent from load alone; the
# in-process build/bench/monitor_overhead (run at the end) alternates single iterations and
# resolves far less.
# On a machine with a GPU (nvidia-smi sees one, and the build has CUDA) it runs GPT-2 124M in
# bf16 on one GPU too.
#
# Usage (repo root): bench/monitor_overhead.sh [BUILD_DIR] [REPS]
#   env: ITERS (default 200 CPU, 100 GPU), DEVICES (cpu, cuda or "cpu cuda"), OUT (logs; /tmp)
set -euo pipefail
build=${1:-build}
reps=${2:-5}
troupe=$build/apps/troupe
[ -x "$troupe" ] || { echo "no $troupe: build first (cmake --build $build)" >&2; exit 1; }
out=${OUT:-/tmp}/monitor_overhead
mkdir -p "$out"
if [ -z "${DEVICES:-}" ]; then
  DEVICES=cpu
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then DEVICES="cpu cuda"; fi
fi

# Mean "elapsed time per iteration (ms)" over a log's lines, the first tenth left out.
ms_per_iteration() {
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{ v[NR] = $NF } END {
    skip = int(NR / 10); for (i = skip + 1; i <= NR; ++i) { s += v[i]; n++ }
    if (n == 0) { print "nan"; exit } printf "%.4f\n", s / n }'
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_once() {  # device way rep
  local device=$1 way=$2 rep=$3 log="$out/$1-$2-$3.log" args=()
  if [ "$device" = cpu ]; then
    # gpt2-tiny with a small vocabulary: tens of ms an iteration on two cores, so a fixed cost
    # per published message would show.
    args=(--device cpu --model gpt2-tiny --vocab-size 4096 --micro-batch-size 2 --global-batch-size 2
          --train-iters "${ITERS:-200}")
  else
    args=(--device cuda --bf16 --model gpt2-124m --vocab-size 50257 --micro-batch-size 8 --global-batch-size 8
          --train-iters "${ITERS:-100}")
  fi
  args+=(--mock-data --log-interval 1 --eval-interval 0 --eval-iters 0 --lr 1e-4)
  local port metrics watcher="" scraper=""
  if [ "$way" != off ]; then
    port=$(free_port) metrics=$(free_port)
    args+=(--monitor-endpoint "tcp://127.0.0.1:$port" --metrics-port "$metrics")
  fi
  "$troupe" train "${args[@]}" >"$log" 2>&1 &
  local pid=$!
  if [ "$way" = attached ]; then
    "$troupe" monitor "tcp://127.0.0.1:$port" --timeout 60 >"$out/$device-$way-$rep.monitor" 2>&1 &
    watcher=$!
    (while kill -0 "$pid" 2>/dev/null; do  # bash's /dev/tcp: no process started per scrape
       { exec 3<>"/dev/tcp/127.0.0.1/$metrics" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3 >/dev/null
         exec 3>&-; } 2>/dev/null || true
       sleep 1
     done) &
    scraper=$!
  fi
  wait "$pid"
  [ -z "$watcher" ] || wait "$watcher" || true
  [ -z "$scraper" ] || wait "$scraper" || true
  ms_per_iteration "$log"
}

for device in $DEVICES; do
  table="$out/$device.tsv"
  : >"$table"
  for rep in $(seq 1 "$reps"); do
    row="$rep"
    for way in off on attached; do
      ms=$(run_once "$device" "$way" "$rep")
      row+=$'\t'"$ms"
      printf '%s rep %d %-8s %9.4f ms/iteration\n' "$device" "$rep" "$way" "$ms"
    done
    echo "$row" >>"$table"
  done
  # Each repetition's three runs ran back to back: their ratios cancel slow drift in the load.
  echo "==== $device over $reps repetitions: median ms/iteration, median of the per-repetition ratios against off"
  awk -F'\t' '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    { n++; off[n] = $2; on[n] = $3; at[n] = $4; r_on[n] = $3 / $2; r_at[n] = $4 / $2 }
    END {
      printf "off       %9.4f ms/iteration\n", median(off, n)
      m = median(on, n); r = median(r_on, n); printf "on        %9.4f ms/iteration  x%.4f (%+.2f%%)\n", m, r, (r - 1) * 100
      m = median(at, n); r = median(r_at, n); printf "attached  %9.4f ms/iteration  x%.4f (%+.2f%%)\n", m, r, (r - 1) * 100
    }' "$table"
done
# The same question inside one process (blocks publishing every iteration vs none, alternating),
# and the direct cost of one record on each thread: far below what whole runs can resolve.
if [ -x "$build/bench/monitor_overhead" ]; then
  for device in $DEVICES; do
    echo "==== $device: build/bench/monitor_overhead"
    "$build/bench/monitor_overhead" --device "$device"
  done
fi
