#!/usr/bin/env bash
# Where the MNIST CNN's CUDA step spends its time, fp32 against bf16 and fp16 (docs/history/GPU-RUNS.md: the
# 16-bit CNN was slower than the fp32 one on the H100 and H200 until convolution moved to cuDNN's
# graph API with cached plans; HG_CUDNN_LEGACY_API=1 in the environment profiles the old calls). After tools/gpu-bundle.sh here:
#   run(command="bash tools/gpu-profile-cnn.sh", carry=[".carry"], timeout_s=240)
# ($OUT/cudnn-summary.txt, the rest in $OUT/profile-logs.tar.gz; about 85 s on a fresh H100).
# Builds only the example and the CUDA backend (in build-gpu, configured as tools/gpu-check
# does), then trains one epoch per precision under cuDNN's API log (level 3, gzipped into $OUT:
# every cuDNN call, and the engine and knobs of every convolution). The device image has no
# Nsight Systems (`nsys`), so per-kernel times are not taken here.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/gpu-out}
build=${GPU_CHECK_BUILD:-build-gpu}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
# shellcheck source=tools/gpu-env.sh
. "$root/tools/gpu-env.sh"
trap 'hg_pack_logs "$out" profile-logs.tar.gz cudnn-summary.txt' EXIT  # the summary stays out
hg_gpu_env "$root/.carry" "$root/$build-cudalibs" > "$out/env.log" 2>&1
if [ ! -d "$build" ]; then
  meson setup "$build" -Dnative=false "${HG_MESON_ARGS[@]}" > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
fi
t0=$SECONDS
ninja -C "$build" examples/mnist_cnn libhalfgrad_cuda.so > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
echo "built examples/mnist_cnn in $((SECONDS - t0)) s"
data=$root/$build-data/mnist
mkdir -p "$data"
for gz in .carry/mnist/*.gz; do gunzip -c "$gz" > "$data/$(basename "$gz" .gz)"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for amp in off bf16 fp16; do
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/cudnn-$amp.log" \
    "$build/examples/mnist_cnn" --data "$data" --epochs 1 --device cuda --amp "$amp" > "$out/run-$amp.log" 2>&1
  gzip -f "$out/cudnn-$amp.log"
  echo "$amp: $(tail -1 "$out/run-$amp.log")"
done
python3 tools/cudnn_log_summary.py "$out"/cudnn-off.log.gz "$out"/cudnn-bf16.log.gz "$out"/cudnn-fp16.log.gz |
  tee "$out/cudnn-summary.txt"
