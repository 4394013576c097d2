#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test. GPU tests (label
# `gpu`) report "skipped" on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
