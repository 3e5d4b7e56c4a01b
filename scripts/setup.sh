#!/usr/bin/env bash
# Installs the build dependencies (Debian 12 package names) and builds diskformer into build/.
# Usage: scripts/setup.sh [--deps-only] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake ninja-build g++ clang pkg-config git
      libgtest-dev nlohmann-json3-dev libpcre2-dev libcli11-dev libfmt-dev
      libcpp-httplib-dev libcurl4-openssl-dev libssl-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js runs llama.cpp (node-llama-cpp) as the test oracle; keep a newer one if present.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--deps-only" ] && exit 0
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build
