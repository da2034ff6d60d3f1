#!/usr/bin/env bash
# Trains an MNIST example over several seeds in halfgrad and in PyTorch (tools/mnist_torch.py,
# same model, data and hyperparameters) and prints each run's test accuracy with the mean,
# standard deviation, minimum and maximum per framework. One seed says little: on the MLP the
# spread between seeds is about 0.4 points.
#
#   bash tools/accuracy-sweep.sh mlp 1 10      # model, epochs, seeds (0..N-1)
#   AMP=bf16 bash tools/accuracy-sweep.sh mlp 1 5
# Needs a build (build/examples, or $BUILD/examples) and datasets/mnist (tools/fetch-mnist.sh, or
# $DATA). PyTorch runs only when /usr/bin/python3 (or $PYTHON) can import torch.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-mlp}
epochs=${2:-1}
seeds=${3:-10}
amp=${AMP:-off}
build=${BUILD:-build}
data=${DATA:-datasets/mnist}
python=${PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

accuracy() { grep '^{' | tail -1 | sed -E 's/.*"test_accuracy": ?([0-9.]+).*/\1/'; }

have_torch=0
"$python" -c "import torch" 2>/dev/null && have_torch=1
for ((seed = 0; seed < seeds; ++seed)); do
  "$build/examples/mnist_$model" --data "$data" --device cpu --epochs "$epochs" --amp "$amp" --seed "$seed" \
    | accuracy >>"$out/halfgrad"
  if [ "$have_torch" = 1 ]; then
    "$python" tools/mnist_torch.py --model "$model" --data "$data" --epochs "$epochs" --amp "$amp" --seed "$seed" \
      | accuracy >>"$out/pytorch"
  fi
  echo "seed $seed: halfgrad $(tail -1 "$out/halfgrad")$([ "$have_torch" = 1 ] && echo ", pytorch $(tail -1 "$out/pytorch")")"
done
for framework in halfgrad pytorch; do
  [ -f "$out/$framework" ] || continue
  "$python" - "$out/$framework" "$framework" "$model" "$epochs" "$amp" <<'EOF'
import statistics, sys
values = [float(line) for line in open(sys.argv[1]) if line.strip()]
sd = statistics.stdev(values) if len(values) > 1 else 0.0
print(f"{sys.argv[2]:8} {sys.argv[3]} epochs={sys.argv[4]} amp={sys.argv[5]} seeds={len(values)}: "
      f"mean {statistics.mean(values):.4f} sd {sd:.4f} min {min(values):.4f} max {max(values):.4f}")
EOF
done
