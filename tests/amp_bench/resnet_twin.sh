#!/usr/bin/env bash
# amp_bench's resnet cell beside PyTorch's, tiny: the same portable weights and images, so after
# SGD steps in float32 the losses agree to 1e-4 (batch norm in training mode on both sides). First
# ResNet-18 (3x32x32, the CPU's network), then one step of ResNet-50 (3x224x224, the network the
# cell runs on CUDA, which cannot run here): its definition checked against the PyTorch twin's.
# Fails without a python that imports torch unless HG_TEST_WITHOUT_TORCH=1 (then exit 77,
# skipped). Usage: resnet_twin.sh AMP_BENCH
set -euo pipefail
bench="$1"
# shellcheck source=tests/amp_bench/torch_python.sh
. "$(dirname "$0")/torch_python.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
check() {
  "$python" - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
(r,) = d["results"]
assert r["model"] == "resnet" and r["batch"] == int(sys.argv[2]), r
assert r["halfgrad"]["status"] == "ok" and r["torch"]["status"] == "ok", r
assert abs(r["loss_diff_vs_torch"]) < 1e-4, f"halfgrad and PyTorch losses differ by {r['loss_diff_vs_torch']}"
print(f"resnet twin ok ({r['halfgrad']['note']}): loss {r['halfgrad']['final_loss']:.6f}, "
      f"halfgrad - PyTorch {r['loss_diff_vs_torch']:+.2e}")
PY
}
"$bench" --models resnet --resnet-batch-cpu 4 --precisions fp32 --devices cpu --steps 2 --warmup 0 --threads 1 \
  --python "$python" --json "$tmp/out.json" >"$tmp/table.txt"
cat "$tmp/table.txt"
check "$tmp/out.json" 4
"$bench" --models resnet --resnet-cpu resnet50 --resnet-batch-cpu 2 --precisions fp32 --devices cpu --steps 1 \
  --warmup 0 --threads 2 --python "$python" --json "$tmp/out50.json" >"$tmp/table50.txt"
cat "$tmp/table50.txt"
check "$tmp/out50.json" 2
