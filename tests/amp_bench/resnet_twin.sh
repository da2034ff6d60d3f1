#!/usr/bin/env bash
# amp_bench's resnet cell (ResNet-18, 3x32x32) beside PyTorch's, tiny: the same portable weights
# and images, so after 2 SGD steps in float32 the losses agree to 1e-4 (batch norm in training
# mode on both sides). Fails without a python that imports torch unless HG_TEST_WITHOUT_TORCH=1
# (then exit 77, skipped). Usage: resnet_twin.sh AMP_BENCH
set -euo pipefail
bench="$1"
# shellcheck source=tests/amp_bench/torch_python.sh
. "$(dirname "$0")/torch_python.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bench" --models resnet --resnet-batch-cpu 4 --precisions fp32 --devices cpu --steps 2 --warmup 0 --threads 1 \
  --python "$python" --json "$tmp/out.json" >"$tmp/table.txt"
cat "$tmp/table.txt"
"$python" - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
(r,) = d["results"]
assert r["model"] == "resnet" and r["batch"] == 4, r
assert r["halfgrad"]["status"] == "ok" and r["torch"]["status"] == "ok", r
assert abs(r["loss_diff_vs_torch"]) < 1e-4, f"halfgrad and PyTorch losses differ by {r['loss_diff_vs_torch']}"
print(f"resnet twin ok: loss {r['halfgrad']['final_loss']:.6f}, halfgrad - PyTorch {r['loss_diff_vs_torch']:+.2e}")
PY
