#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test. GPU tests (label
# `gpu`) report "skipped" on a machine without a GPU. Then the fuzz and sanitizer stage
# (scripts/fuzz_and_sanitize.sh, about 8 minutes on two cores) when clang is installed;
# TROUPE_SKIP_SANITIZERS=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")
if [ "${TROUPE_SKIP_SANITIZERS:-0}" = 1 ]; then
  echo "test: the fuzz and sanitizer stage is skipped (TROUPE_SKIP_SANITIZERS=1)"
elif ! command -v clang++ >/dev/null; then
  echo "test: the fuzz and sanitizer stage is skipped: no clang++ (scripts/setup.sh installs it)"
else
  scripts/fuzz_and_sanitize.sh
fi
