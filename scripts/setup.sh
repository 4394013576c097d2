#!/usr/bin/env bash
# Installs the Debian 12 packages Troupe needs (when missing), then configures and builds.
# Usage: scripts/setup.sh [BUILD_DIR]   (default: build). Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

packages=(build-essential cmake pkg-config libopenblas-dev nlohmann-json3-dev libcli11-dev libutf8proc-dev
          libgtest-dev libgmock-dev libbenchmark-dev libspdlog-dev libcaf-dev libmsgpack-dev libopenmpi-dev openmpi-bin python3
          libzmq3-dev cppzmq-dev libboost1.74-dev libpcre2-dev  # Boost: Beast and Asio (actors/http)
          clang-format clang-tidy  # scripts/check_format.sh, scripts/check_tidy.sh (tests)
          libyaml-cpp-dev  # troupe --yaml-cfg (Megatron's YAML config files)
          clang libclang-rt-14-dev llvm  # scripts/fuzz.sh: libFuzzer, the sanitizer runtimes, llvm-symbolizer
          chromium libpng-dev)  # the dashboard test: headless Chromium, and libpng to read its screenshot
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Node.js runs the reference implementations the tokenizer, chat-template and serve tests compare
# with (tests/node/package.json: Hugging Face's tokenizers and jinja ports, the OpenAI client).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs npm"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
fi
if ! cmp -s tests/node/package-lock.json tests/node/node_modules/.troupe-installed-lock.json; then
  echo "setup: installing the Node.js test references (tests/node)"
  npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
  cp tests/node/package-lock.json tests/node/node_modules/.troupe-installed-lock.json
fi

cuda_args=()
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
else
  echo "setup: no nvcc at /usr/local/cuda/bin: building the CPU backend only"
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
