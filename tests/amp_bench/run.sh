#!/usr/bin/env bash
# A tiny end-to-end run of amp_bench (one model, 1 warm-up + 2 timed steps, no PyTorch): it must
# exit 0 and write JSON with the fields docs/BENCHMARKS.md describes. Usage: run.sh AMP_BENCH
set -euo pipefail
bench="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bench" --quick --steps 2 --warmup 1 --models linear --precisions fp32,bf16 --devices cpu --no-torch \
  --json "$tmp/out.json" >"$tmp/table.txt"
cat "$tmp/table.txt"
grep -q "^linear *fp32 *cpu" "$tmp/table.txt"
python3 - "$tmp/out.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "amp_bench", d["tool"]
for k in ("date", "command", "machine", "settings", "torch", "results"):
    assert k in d, k
assert d["settings"]["steps"] == 2 and d["settings"]["warmup"] == 1
assert d["torch"]["available"] is False
cells = {(r["model"], r["precision"], r["device"]): r for r in d["results"]}
assert set(cells) == {("linear", "fp32", "cpu"), ("linear", "bf16", "cpu")}, set(cells)
for r in cells.values():
    h = r["halfgrad"]
    assert h["status"] == "ok", h
    assert h["steps"] == 2
    ms = h["step_ms"]
    assert 0 < ms["p10"] <= ms["median"] <= ms["p90"], ms
    assert h["samples_per_s"] > 0 and h["peak_bytes"] > 0
    assert math.isfinite(h["final_loss"]) and 0 < h["final_loss"] < 10, h["final_loss"]
    assert r["torch"] is None
assert cells[("linear", "fp32", "cpu")]["speedup_vs_fp32"] == 1.0
assert abs(cells[("linear", "bf16", "cpu")]["loss_diff_vs_fp32"]) < 0.05
print("amp_bench JSON ok")
PY
# --rounds 2: every cell twice, each round listed under the table and in the JSON.
"$bench" --rounds 2 --steps 2 --warmup 1 --models linear --precisions fp32,bf16 --devices cpu --no-torch \
  --json "$tmp/rounds.json" >"$tmp/rounds.txt"
grep -q "^2 rounds, each halfgrad's cells then PyTorch's" "$tmp/rounds.txt"
grep -q "^per round" "$tmp/rounds.txt"
[ "$(grep -c '^linear *bf16 *cpu .* / - = - .* / - = -' "$tmp/rounds.txt")" -eq 1 ]
python3 - "$tmp/rounds.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["rounds"] == 2, d["settings"]
for r in d["results"]:
    assert len(r["rounds"]) == 2, r["rounds"]
    assert r["halfgrad"]["steps"] == 4, r["halfgrad"]  # two rounds of two timed steps
    meds = sorted(x["halfgrad_median_ms"] for x in r["rounds"])
    assert meds[0] <= r["halfgrad"]["step_ms"]["median"] <= meds[1], (meds, r["halfgrad"]["step_ms"])
print("amp_bench --rounds ok")
PY
# Bad input is refused with a message, not a crash.
if "$bench" --models nope 2>"$tmp/err.txt"; then echo "accepted --models nope" >&2; exit 1; fi
grep -q "nope" "$tmp/err.txt"
if "$bench" --models linear --no-torch --real-data --data "$tmp/no-such-dir" --steps 1 2>"$tmp/err.txt" >/dev/null; then
  echo "accepted a missing MNIST directory" >&2
  exit 1
fi
grep -q "fetch-mnist" "$tmp/err.txt"
echo "amp_bench errors ok"
# --kernels (the GEMM and conv microbenchmarks), tiny: one line per dtype.
"$bench" --kernels --gemm-size 64 --optim-size 64 --batch 2 --steps 2 --warmup 1 >"$tmp/kernels.txt"
cat "$tmp/kernels.txt"
grep -q "^gemm 64x64x64 float32 *: halfgrad .* OpenBLAS sgemm" "$tmp/kernels.txt"
grep -q "^gemm 64x64x64 bfloat16: halfgrad" "$tmp/kernels.txt"
[ "$(grep -c '^conv1+conv2 .* forward+backward' "$tmp/kernels.txt")" -eq 3 ]
grep -q "^optimizer SGD step, 4 x 64x64 float32 weights, no copy *:" "$tmp/kernels.txt"
grep -q "^optimizer SGD step, 4 x 64x64 float32 weights, bfloat16 copy *:" "$tmp/kernels.txt"
grep -q "^optimizer SGD step, 4 x 64x64 float32 weights, float16 copy *:" "$tmp/kernels.txt"
# The gpt2 cell in fp8 (the CPU emulation): it runs and says that it was emulated; of tiny's 9
# GEMMs the classifier's (50257 outputs, not a multiple of 16) falls back to bf16.
"$bench" --models gpt2 --gpt2-cpu tiny:32:2 --precisions fp8 --devices cpu --steps 2 --warmup 0 --no-torch \
  --threads 1 --json "$tmp/fp8.json" >"$tmp/fp8.txt"
python3 - "$tmp/fp8.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
(r,) = d["results"]
h = r["halfgrad"]
assert r["model"] == "gpt2" and r["precision"] == "fp8" and h["status"] == "ok", r
assert math.isfinite(h["final_loss"]) and 10 < h["final_loss"] < 11.5, h["final_loss"]
assert h["note"].startswith("fp8 emulated") and "0 of 9 GEMMs per step fell back" in h["note"], h["note"]
print("amp_bench gpt2 fp8 ok:", h["note"])
PY
