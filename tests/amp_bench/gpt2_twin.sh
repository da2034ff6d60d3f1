#!/usr/bin/env bash
# amp_bench's gpt2 cell beside PyTorch's, tiny: both start from the same portable weights and
# tokens, so after 3 AdamW steps their float32 losses agree to 1e-4 and their bf16 ones within
# bf16's noise; the JSON carries tokens/s and MFU for both sides. Fails without a python that
# imports torch unless HG_TEST_WITHOUT_TORCH=1 (then exit 77, skipped).
# Usage: gpt2_twin.sh AMP_BENCH
set -euo pipefail
bench="$1"
# shellcheck source=tests/amp_bench/torch_python.sh
. "$(dirname "$0")/torch_python.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bench" --models gpt2 --gpt2-cpu tiny:32:2 --precisions fp32,bf16 --devices cpu --steps 3 --warmup 0 \
  --threads 1 --python "$python" --json "$tmp/out.json" >"$tmp/table.txt"
cat "$tmp/table.txt"
grep -q "^gpt2 fp32  cpu  64 tokens/step: halfgrad .* tokens/s" "$tmp/table.txt"
"$python" - "$tmp/out.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
cells = {r["precision"]: r for r in d["results"]}
assert set(cells) == {"fp32", "bf16"}, set(cells)
for prec, bound in (("fp32", 1e-4), ("bf16", 2e-2)):
    r = cells[prec]
    assert r["model"] == "gpt2" and r["batch"] == 2 and r["tokens_per_step"] == 64, r
    h, t = r["halfgrad"], r["torch"]
    assert h["status"] == "ok" and t is not None and t["status"] == "ok", (h, t)
    assert h["steps"] == t["steps"] == 3
    assert 0 < h["mfu"] < 1 and 0 < t["mfu"] < 1 and h["tokens_per_s"] > 0 and t["tokens_per_s"] > 0, (h, t)
    # ln(50257) = 10.82: three small steps from near-uniform logits stay close to it.
    assert 10 < h["final_loss"] < 11.5, h["final_loss"]
    diff = abs(r["loss_diff_vs_torch"])
    assert diff < bound, f"{prec}: halfgrad and PyTorch losses differ by {diff} (bound {bound})"
    print(f"{prec}: loss {h['final_loss']:.6f}, halfgrad - PyTorch {r['loss_diff_vs_torch']:+.2e}")
print("gpt2 twin ok")
PY
