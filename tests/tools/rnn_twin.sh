#!/usr/bin/env bash
# nn::LSTM, nn::GRU and nn::RNN against PyTorch 1.13's (tests/tools/rnn_twin.py writes weights,
# inputs, outputs and gradients; rnn_twin compares). Without torch in /usr/bin/python3 the test
# fails, unless HG_TEST_WITHOUT_TORCH=1 (then it reports itself skipped, 77).
# Usage: rnn_twin.sh SOURCE_ROOT RNN_TWIN_BINARY
set -euo pipefail
src="$1"
twin="$2"
python=/usr/bin/python3
if ! "$python" -c "import torch" >/dev/null 2>&1; then
  if [ "${HG_TEST_WITHOUT_TORCH:-0}" = 1 ]; then
    echo "rnn_twin: /usr/bin/python3 cannot import torch: skipped"
    exit 77
  fi
  echo "rnn_twin: /usr/bin/python3 cannot import torch (HG_TEST_WITHOUT_TORCH=1 skips this test)"
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" "$src/tests/tools/rnn_twin.py" "$tmp/rnn.safetensors"
"$twin" "$tmp/rnn.safetensors"
