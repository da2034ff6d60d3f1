#!/usr/bin/env bash
# nn.LSTM forward and forward+backward, halfgrad beside PyTorch (/usr/bin/python3), in one run:
# seq 64, batch 32, input 128, hidden 256, 2 layers, fp32 and bfloat16 autocast, 1 and 2 threads.
# Usage: tools/rnn_bench.sh [BUILD_DIR] [extra rnn_bench/rnn_bench_torch.py flags, e.g. --module gru]
set -euo pipefail
build="${1:-build}"
shift || true
here="$(cd "$(dirname "$0")" && pwd)"
for threads in 1 2; do
  for amp in off bf16; do
    env HG_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
      "$build/tools/rnn_bench" --amp $amp "$@"
    env OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/rnn_bench_torch.py" --threads $threads --amp $amp "$@"
  done
done
