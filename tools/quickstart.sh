#!/usr/bin/env bash
# The README quick start: on a fresh Debian 12 machine, installs the dependencies, builds,
# fetches MNIST and trains the MLP for one epoch. Safe to run again (each step is idempotent).
# Extra arguments go to the example, e.g. bash tools/quickstart.sh --amp bf16
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-debian.sh
[ -d build ] || meson setup build
ninja -C build examples/mnist_mlp
bash tools/fetch-mnist.sh
build/examples/mnist_mlp --data datasets/mnist --epochs 1 --device cpu "$@"
