#!/usr/bin/env bash
# halfgrad's char_transformer against its PyTorch twin: for each seed, alternates halfgrad and
# PyTorch runs (fp32, then bf16, then halfgrad fp16) so machine load hits both alike, and prints
# each run's JSON line followed by the 1-minute load average. Usage:
#   tools/char_transformer_sweep.sh BUILD_DIR THREADS "SEEDS" [extra flags for both sides...]
#   tools/char_transformer_sweep.sh build 1 "0 1 2" --steps 1000 > sweep.jsonl
set -euo pipefail
build=$1 threads=$2 seeds=$3
shift 3
export HG_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
load() { cut -d' ' -f1 /proc/loadavg; }
for seed in $seeds; do
  for amp in off bf16; do
    echo "$("$build/examples/char_transformer" --seed "$seed" --amp "$amp" "$@" | tail -n 1) load=$(load)"
    echo "$(/usr/bin/python3 tools/char_transformer_torch.py --threads "$threads" --seed "$seed" --amp "$amp" "$@" |
      tail -n 1) load=$(load)"
  done
  echo "$("$build/examples/char_transformer" --seed "$seed" --amp fp16 "$@" | tail -n 1) load=$(load)"
done
