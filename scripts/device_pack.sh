#!/usr/bin/env bash
# Packs a build for the GPU machine (see the team's device notes): the runtime libraries
# and a slim copy of BUILD_DIR into .devdeps, trimmed to fit the 64 MiB transfer limit:
# our own libraries are already in the slim build, and every file over 256 KB travels
# xz-compressed. Also copies the PyTorch baselines into .baselines/.
# On the device: `find .devdeps -name '*.xz' | xargs -P16 -n1 xz -d; source .devdeps/env.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
../shared/device/pack-runtime.sh --slim-build "$build"
rm -f .devdeps/lib/libtroupe_*.so
# Symbols are not needed there; stripping halves the test binaries.
find .devdeps/build -type f -perm -u+x -exec sh -c 'head -c4 "$1" | grep -q ELF && strip --strip-unneeded "$1"' _ {} \;
find .devdeps/build -name '*.so' -exec strip --strip-unneeded {} \;
find .devdeps -type f -size +256k ! -name '*.xz' -print0 | xargs -0 -P2 -n1 xz -6
mkdir -p .baselines && cp ../shared/baselines/*.py .baselines/
du -sh .devdeps
