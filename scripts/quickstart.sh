#!/usr/bin/env bash
# The main job: installs what is missing, builds, then trains a small GPT on the bundled
# corpus (GPT-2 124M on a GPU if there is one, a tiny GPT on the CPU otherwise), printing
# the loss curve, throughput and a text sample. Extra arguments go to train_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/bench/train_bench --data-path assets/corpora/moby-dick.jsonl "$@"
