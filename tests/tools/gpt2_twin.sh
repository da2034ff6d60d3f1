#!/usr/bin/env bash
# hg::data::Gpt2Tokenizer against gpt-3-encoder's own JavaScript encoder, token for token, on
# tests/data/gpt2/sample.txt (102 fortunes from Debian's collections, then contractions, numbers,
# scripts, emoji, whitespace runs and punctuation). Then round trips that only our side can do:
# bytes that are not UTF-8, and every byte value. The vocabulary comes from datasets/gpt2, fetched
# by tools/fetch-gpt2-vocab.sh when missing; the test reports itself skipped (77) only when the
# files are absent and cannot be fetched, or node is missing.
# Usage: gpt2_twin.sh SOURCE_ROOT GPT2_ENCODE_BINARY
set -euo pipefail
src="$1"
encode="$2"
vocab="$src/datasets/gpt2"
if ! bash "$src/tools/fetch-gpt2-vocab.sh" "$vocab"; then
  echo "gpt2_twin: SKIP: the GPT-2 vocabulary is not in $vocab and could not be fetched"
  exit 77
fi
if ! command -v node >/dev/null; then
  echo "gpt2_twin: SKIP: node is missing (bash tools/setup-debian.sh installs nodejs)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sample="$src/tests/data/gpt2/sample.txt"
"$encode" "$vocab" "$sample" >"$tmp/ours.json"
node "$src/tests/tools/gpt2_encode.js" "$vocab" "$sample" >"$tmp/reference.json"
python3 - "$tmp/ours.json" "$tmp/reference.json" <<'PY'
import json, sys
ours, ref = (json.load(open(p)) for p in sys.argv[1:3])
if ours != ref:
    k = next((i for i in range(min(len(ours), len(ref))) if ours[i] != ref[i]), min(len(ours), len(ref)))
    print(f"gpt2_twin: FAIL: {len(ours)} tokens here, {len(ref)} from Encoder.js; first difference at token {k}: "
          f"ours {ours[max(0, k - 3):k + 5]}, reference {ref[max(0, k - 3):k + 5]}")
    sys.exit(1)
print(f"gpt2_twin: {len(ours)} tokens, the same as gpt-3-encoder's Encoder.js")
PY
# Round trips (gpt2_encode fails when decode(encode(bytes)) differs): bytes that are not UTF-8,
# and all 256 byte values in a pseudo-random order.
printf 'caf\xc3\xa9 \xff\xfe broken \xc3 \xed\xa0\x80 \xf4\x90\x80\x80 ok\x00\x01\n' >"$tmp/invalid.bin"
python3 -c 'import random, sys; r = random.Random(1); b = bytes(range(256)) * 64; b = bytearray(b); r.shuffle(b); sys.stdout.buffer.write(b)' >"$tmp/bytes.bin"
"$encode" "$vocab" "$tmp/invalid.bin" "$tmp/bytes.bin" >/dev/null
echo "gpt2_twin: invalid UTF-8 and all byte values round-trip"
