#!/usr/bin/env bash
# tools/accuracy-sweep.sh and its PyTorch twin tools/mnist_torch.py on a tiny MNIST written
# here (256 training and 100 test images): both frameworks must train, print their JSON line,
# and the sweep must summarise them. A truncated IDX file must be refused by name.
# Without a python that can import torch the test fails (tools/setup-debian.sh installs Debian's
# python3-torch); HG_TEST_WITHOUT_TORCH=1 checks halfgrad's side only and reports the test skipped.
# Usage: mnist_twin.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src="$1"
build="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(0)
def write(path, dims, data):
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 8, len(dims)) + struct.pack(">" + "I" * len(dims), *dims) + bytes(data))
for prefix, n in (("train", 256), ("t10k", 100)):
    labels = [random.randrange(10) for _ in range(n)]
    # Each class lights one band of rows, plus noise: learnable in one epoch.
    pixels = []
    for y in labels:
        for r in range(28):
            for c in range(28):
                pixels.append(200 if r // 3 == y else random.randrange(40))
    write(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte", (n, 28, 28), pixels)
    write(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte", (n,), labels)
PY
out="$(cd "$src" && DATA="$tmp" BUILD="$build" bash tools/accuracy-sweep.sh mlp 1 2)"
echo "$out"
grep -q "^halfgrad mlp epochs=1 amp=off seeds=2: mean" <<<"$out"
python=""
for p in /usr/bin/python3 python3; do
  if "$p" -c "import torch" >/dev/null 2>&1; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  if [ "${HG_TEST_WITHOUT_TORCH:-0}" = 1 ]; then
    echo "no python with torch: halfgrad's side passed, the PyTorch half is skipped (HG_TEST_WITHOUT_TORCH=1)"
    exit 77
  fi
  echo "no python with torch (tried /usr/bin/python3, python3): install python3-torch (tools/setup-debian.sh)," \
    "or set HG_TEST_WITHOUT_TORCH=1 to skip the PyTorch twin tests"
  exit 1
fi
grep -q "^pytorch  mlp epochs=1 amp=off seeds=2: mean" <<<"$out"
"$python" "$src/tools/mnist_torch.py" --model cnn --data "$tmp" --epochs 1 --batch-size 64 >"$tmp/cnn.txt"
"$python" - "$tmp/cnn.txt" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["model"] == "cnn" and d["epochs"] == 1 and 0.5 <= d["test_accuracy"] <= 1.0, d
print("mnist_torch.py cnn:", d["test_accuracy"])
PY
head -c 100 "$tmp/t10k-images-idx3-ubyte" >"$tmp/short" && mv "$tmp/short" "$tmp/t10k-images-idx3-ubyte"
if "$python" "$src/tools/mnist_torch.py" --data "$tmp" 2>"$tmp/err"; then
  echo "a truncated IDX file was accepted"
  exit 1
fi
grep -q "t10k-images-idx3-ubyte: .* data bytes, header says" "$tmp/err"
echo "mnist twin ok"
