#!/usr/bin/env bash
# The fp16 MLP step (OpenBLAS path) with the cores quiet and with N busy-loop processes beside it
# (review D7). Prints the median step time of `mnist_mlp --amp fp16` for each binary given.
# Usage: tools/bench-blas-load.sh DATA_DIR BUSY_PROCS MNIST_MLP_BINARY...
# DATA_DIR holds MNIST IDX files (tools/fetch-mnist.sh, or a synthetic set of the same format).
set -euo pipefail
data=$1
busy=$2
shift 2
step_ms() {  # step_ms BINARY: median step time in ms from the closing JSON line
  timeout 600 "$1" --data "$data" --device cpu --amp fp16 --epochs 1 --batch-size 128 | tail -n 1 |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step_ms_median"])'
}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load before: $(cut -d' ' -f1 /proc/loadavg)"
for bin in "$@"; do echo "quiet  $bin: $(step_ms "$bin") ms"; done
pids=()
for _ in $(seq "$busy"); do
  bash -c 'while :; do :; done' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
sleep 1
for bin in "$@"; do echo "loaded $bin: $(step_ms "$bin") ms ($busy busy processes)"; done
