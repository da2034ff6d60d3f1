#!/usr/bin/env bash
# GPU performance in about 6 minutes on an H100/H200 (docs/GPU.md), beside the device's PyTorch:
#   1. build only what it needs (op_bench, amp_bench, the gpt2 example) in build-gpu;
#   2. mm TFLOP/s in bf16, fp16 and tf32 at 4096^3 and 8192^3 (op_bench / torch.matmul);
#   3. scaled_dot_product_attention forward and forward+backward at GPT-2's shape, B16 H12 T1024
#      D64 causal, bf16 (op_bench / F.scaled_dot_product_attention);
#   4. the GPT-2 d12 step, T=1024 (amp_bench's gpt2 cell): tokens/s, MFU, peak memory, beside
#      PyTorch eager (bf16, fp16) and torch.compile (bf16);
#   5. the ResNet-50 step, 3x224x224, channels-last (amp_bench's resnet cell): images/s beside
#      PyTorch eager with memory_format=torch.channels_last (bf16, fp16);
#   6. the op recorder's per-op table of a d12 bf16 step and its Chrome trace (examples/gpt2
#      --profile --trace: open gpt2_trace.json in Perfetto).
# Writes $OUT/gpu-perf.json and $OUT/gpu-perf.md (tools/gpu_perf_report.py), logs beside them.
# After tools/gpu-bundle.sh here:
#   run(command="bash tools/gpu-perf.sh", carry=[".carry"], timeout_s=540)
# --cpu-dry-run runs every step on this machine's CPU at toy sizes with build/ (no CUDA needed),
# to check the script and the report before spending device time.
# Environment: GPU_PERF_BATCH (gpt2 batch on cuda, default 16), GPU_PERF_STEPS (timed gpt2 steps,
# default 10), GPU_PERF_RESNET_BATCH (resnet-50 batch on cuda, default 128), HG_PERF_BUDGET_S (seconds for everything, default 520).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
dry=0
[ "${1:-}" = "--cpu-dry-run" ] && dry=1
python=$(command -v python3 || echo python3)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" > /dev/null 2>&1 && python=/usr/bin/python3
budget=${HG_PERF_BUDGET_S:-520}
steps=${GPU_PERF_STEPS:-10}

if [ $dry -eq 1 ]; then
  build=build device=cpu
  mm_sizes=256,512 dtypes=fp32,bf16 sdpa=2,2,128,64 gpt2=tiny:64:2 precisions=fp32,bf16 steps=2
  profile_args=(--model tiny --device cpu --batch-size 2 --val-batches 1)
else
  build=${GPU_CHECK_BUILD:-build-gpu} device=cuda
  mm_sizes=4096,8192 dtypes=bf16,fp16,tf32 sdpa=16,12,1024,64 gpt2=d12:1024:${GPU_PERF_BATCH:-16} precisions=bf16,fp16
  profile_args=(--model d12 --device cuda --batch-size "${GPU_PERF_BATCH:-16}" --val-batches 1)
  export PATH=/usr/local/cuda/bin:$PATH
  # shellcheck source=tools/gpu-env.sh
  . "$root/tools/gpu-env.sh"
  hg_gpu_env "$root/.carry" "$root/$build-cudalibs" > "$out/perf-env.log" 2>&1
fi

status=0
steps_log=$out/perf-steps.txt
: > "$steps_log"
step() {  # step NAME LOGFILE SECONDS COMMAND...: stdout to LOGFILE, stderr to LOGFILE.err
  local name=$1 logf=$2 limit=$3
  shift 3
  local left=$((budget - SECONDS))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "- $name: skipped, ${left} s of the budget left" | tee -a "$steps_log"
    return 1
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$logf" 2> "$out/$logf.err"
  local rc=$?
  echo "- $name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (rc $rc$([ $rc -eq 124 ] && echo ", over ${limit} s"))") in $((SECONDS - t0)) s" |
    tee -a "$steps_log"
  [ $rc -eq 0 ] || status=1
  return $rc
}

if [ ! -d "$build" ]; then
  step configure perf-configure.log 120 meson setup "$build" -Dnative=false "${HG_MESON_ARGS[@]}" ||
    { tail -30 "$out/perf-configure.log.err" "$out/perf-configure.log"; exit 1; }
fi
step build perf-build.log 300 ninja -C "$build" tools/op_bench tools/amp_bench examples/gpt2 ||
  { grep -m 10 -A8 -E "^FAILED:|error:" "$out/perf-build.log"; exit 1; }

op_args=(--device "$device" --mm-sizes "$mm_sizes" --dtypes "$dtypes" --sdpa "$sdpa" --sdpa-dtypes bf16 --iters 10)
step "op_bench (halfgrad)" op_bench_hg.json 90 "$build/tools/op_bench" "${op_args[@]}"
step "op_bench (PyTorch)" op_bench_torch.json 90 "$python" tools/op_bench_torch.py "${op_args[@]}"

gpt2_args=(--models gpt2 --devices "$device" --gpt2-cpu "$gpt2" --gpt2-cuda "$gpt2" --steps "$steps" --warmup 3
  --python "$python")
step "gpt2 step, PyTorch eager" amp_bench_gpt2.txt 180 "$build/tools/amp_bench" "${gpt2_args[@]}" \
  --precisions "$precisions" --json "$out/amp_bench_gpt2.json"
step "gpt2 step, torch.compile" amp_bench_gpt2_compile.txt 150 "$build/tools/amp_bench" "${gpt2_args[@]}" \
  --precisions bf16 --torch-compile --json "$out/amp_bench_gpt2_compile.json"
resnet_args=(--models resnet --devices "$device" --resnet-batch-cpu 4 --resnet-batch-cuda "${GPU_PERF_RESNET_BATCH:-128}"
  --steps "$steps" --warmup 3 --python "$python")
step "resnet-50 step, PyTorch eager (channels-last)" amp_bench_resnet.txt 150 "$build/tools/amp_bench" \
  "${resnet_args[@]}" --precisions "$precisions" --json "$out/amp_bench_resnet.json"
step "gpt2 op profile" gpt2_profile.txt 90 "$build/examples/gpt2" "${profile_args[@]}" --amp bf16 --steps 4 \
  --profile 2 --print-every 1 --trace "$out/gpt2_trace.json"

"$python" tools/gpu_perf_report.py "$out" > /dev/null || status=1
cat "$out/gpu-perf.md"
exit $status
