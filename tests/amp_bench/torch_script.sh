#!/usr/bin/env bash
# A tiny run of tools/amp_bench_torch.py (linear, 1 step): it must print valid JSON with a
# result per cell. Fails when no python can import torch (tools/setup-debian.sh installs Debian's
# python3-torch), unless HG_TEST_WITHOUT_TORCH=1 says to skip (exit 77) instead.
# Usage: torch_script.sh SCRIPT
set -euo pipefail
script="$1"
# shellcheck source=tests/amp_bench/torch_python.sh
. "$(dirname "$0")/torch_python.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" "$script" --models linear --precisions fp32,bf16,fp16 --devices cpu --steps 1 --warmup 0 --threads 1 \
  >"$tmp/out.json"
"$python" - "$tmp/out.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "amp_bench_torch"
rs = {r["precision"]: r for r in d["results"]}
assert set(rs) == {"fp32", "bf16", "fp16"}, set(rs)
for r in rs.values():
    assert r["model"] == "linear" and r["device"] == "cpu" and r["batch"] == 128
    assert r["status"] in ("ok", "unsupported"), r
    if r["status"] == "ok":
        assert r["steps"] == 1 and r["step_ms"]["median"] > 0 and math.isfinite(r["final_loss"])
assert rs["fp32"]["status"] == "ok"
print("amp_bench_torch JSON ok")
PY
