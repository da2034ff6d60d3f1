#!/usr/bin/env bash
# The MNIST CNN's CUDA step with cuDNN's graph API (cached execution plans, the default) against
# the legacy cuDNN calls (HG_CUDNN_LEGACY_API=1), on one warm device in one run, so the two are
# compared under the same load. Run after tools/gpu-check has built build-gpu:
#   run(command="HG_CHECK_BUDGET_S=330 bash tools/gpu-check; bash tools/gpu-conv-ab.sh",
#       carry=[".carry"], timeout_s=540)
# It first runs the cuda suite's conv cases on the legacy path too (both paths must stay right),
# then alternates the two paths: amp_bench's mnist_cnn cell (fp32, bf16, fp16; no PyTorch) and
# one epoch of the MNIST CNN example per precision. Report: $OUT/conv-ab.md, logs in
# $OUT/conv-ab-logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/gpu-out}
build=${GPU_CHECK_BUILD:-build-gpu}
rounds=${HG_AB_ROUNDS:-3}
mkdir -p "$out/conv-ab"
logs=$out/conv-ab
report=$out/conv-ab.md
export PATH=/usr/local/cuda/bin:$PATH
# shellcheck source=tools/gpu-env.sh
. "$root/tools/gpu-env.sh"
hg_gpu_env "$root/.carry" "$root/$build-cudalibs" > "$logs/env.log" 2>&1
trap 'tar -C "$out" -czf "$out/conv-ab-logs.tar.gz" conv-ab && rm -rf "$logs"' EXIT
log() { echo "$*" | tee -a "$report"; }
: > "$report"
log "# cuDNN graph API against the legacy calls (tools/gpu-conv-ab.sh)"
log ""
log "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(cat .carry/COMMIT 2> /dev/null || echo unknown)"
log "- gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -1)"
[ -x "$build/tests/test_cuda" ] && [ -x "$build/tools/amp_bench" ] || { log "build-gpu is missing: run tools/gpu-check first"; exit 1; }

log ""
log "## The conv cases on each path"
for mode in graph legacy; do
  legacy=$([ $mode = legacy ] && echo 1 || echo 0)
  HG_CUDNN_LEGACY_API=$legacy "$build/tests/test_cuda" -tc='*conv*' > "$logs/test-conv-$mode.log" 2>&1
  log "- $mode: rc $? $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/test-conv-$mode.log" | tr '\n' ' ')"
done

data=$root/$build-data/mnist
log ""
log "## amp_bench mnist_cnn (median ms of 50 steps after 10 warm-up), alternating"
log ""
log "| round | path | fp32 | bf16 | fp16 |"
log "|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  for mode in legacy graph; do
    legacy=$([ $mode = legacy ] && echo 1 || echo 0)
    f=$logs/bench-$mode-$r
    HG_CUDNN_LEGACY_API=$legacy "$build/tools/amp_bench" --models mnist_cnn --devices cuda \
      --precisions fp32,bf16,fp16 --steps 50 --warmup 10 --no-torch --json "$f.json" > "$f.log" 2>&1
    cells=$(python3 - "$f.json" << 'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
ms = {r["precision"]: round(r["halfgrad"]["step_ms"]["median"], 3) for r in rows
      if r["device"] == "cuda" and r.get("halfgrad") and r["halfgrad"].get("status") == "ok"}
print(" | ".join(str(ms.get(p, "?")) for p in ("fp32", "bf16", "fp16")))
EOF
    )
    log "| $r | $mode | $cells |"
  done
done

if [ -d "$data" ]; then
  log ""
  log "## MNIST CNN example, one epoch (median step ms, test accuracy), alternating"
  log ""
  log "| path | amp | step ms | accuracy |"
  log "|---|---|---|---|"
  for amp in off bf16 fp16; do
    for mode in legacy graph; do
      legacy=$([ $mode = legacy ] && echo 1 || echo 0)
      f=$logs/example-$mode-$amp.log
      HG_CUDNN_LEGACY_API=$legacy "$build/examples/mnist_cnn" --data "$data" --epochs 1 --device cuda --amp "$amp" > "$f" 2>&1
      line=$(grep -o '{"model".*}' "$f" | tail -1)
      ms=$(echo "$line" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(d.get("step_ms_median","?"), d.get("test_accuracy","?"))' 2> /dev/null)
      log "| $mode | $amp | ${ms% *} | ${ms#* } |"
    done
  done
fi
