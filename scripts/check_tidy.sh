#!/usr/bin/env bash
# clang-tidy (.clang-tidy: checks that find bugs) over our C++ sources, with the build's
# compile_commands.json. By default only the sources the newest commit changed (and those not
# committed yet): a whole-tree run (--all) takes about 8 min on 2 cores, too long for every
# CI run, so each commit is checked as it lands and --all is run after large changes.
# Usage: scripts/check_tidy.sh [BUILD_DIR] [--all]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build all=0
for a in "$@"; do
  case "$a" in --all) all=1 ;; *) build=$a ;; esac
done
command -v clang-tidy >/dev/null || { echo "check_tidy: clang-tidy is not installed (apt-get install clang-tidy)"; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "check_tidy: no $build/compile_commands.json (configure with cmake first)"; exit 1; }
ours='^(base|kernels|data|storage|schedules|model|actors|apps|bench|tests)/.*\.cpp$'
if [ $all -eq 1 ] || ! git rev-parse -q --verify HEAD~1 >/dev/null; then
  mapfile -t files < <(git ls-files '*.cpp' | grep -E "$ours")
else
  mapfile -t files < <({ git diff --name-only -M HEAD~1 --diff-filter=AM; git diff --name-only;
                         git ls-files --others --exclude-standard; } |
                       sort -u | grep -E "$ours" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
fi
# Only sources the build compiles (the CUDA-only ones are absent without nvcc).
mapfile -t files < <(for f in "${files[@]}"; do grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json" && echo "$f"; done)
[ ${#files[@]} -gt 0 ] || { echo "check_tidy: no changed sources"; exit 0; }
echo "check_tidy: ${#files[@]} sources"
log=$(mktemp)
if ! printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet > "$log" 2>&1; then
  grep -E 'error:|warning:' "$log" | sort -u | head -100
  echo "check_tidy: clang-tidy found problems (above)"
  exit 1
fi
echo "check_tidy: clean"
