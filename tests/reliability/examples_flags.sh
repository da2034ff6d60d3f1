#!/usr/bin/env bash
# The examples' flags: every bad value is a one-line error with a non-zero exit (no hang, no
# 300-digit numbers), and the closing JSON line is valid JSON (null for non-finite values).
set -uo pipefail
bin=$1
fail=0
expect_error() {  # expect_error PROGRAM ARGS...: non-zero exit, one short "error:" line on stderr
  local out rc
  out=$(timeout 20 "$bin/$1" "${@:2}" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] ||
     [[ "$out" != error:* ]] || [ "${#out}" -gt 200 ]; then
    echo "FAIL: $* -> rc $rc: $out"
    fail=1
  else
    echo "ok: $* -> $out"
  fi
}
for p in mnist_mlp linear_regression; do
  expect_error $p --epochs -3
  expect_error $p --epochs 0
  expect_error $p --epochs 1e12
  expect_error $p --epochs 99999999999999999999999
  expect_error $p --lr -1
  expect_error $p --lr nan
  expect_error $p --lr 1e308
  expect_error $p --seed -1
  expect_error $p --seed abc
done
expect_error mnist_mlp --batch-size 0
expect_error mnist_mlp --batch-size 9223372036854775807
expect_error mnist_mlp --batch-size abc
expect_error mnist_mlp --amp foo
expect_error mnist_mlp --workers -1
expect_error mnist_mlp --workers 65
expect_error mnist_mlp --workers abc
expect_error mnist_mlp --device tpu
# --save is checked before any data is read or training starts.
expect_error mnist_mlp --data /nonexistent --save /nonexistent-dir/ckpt.st
expect_error char_transformer --steps 0
expect_error char_transformer --steps abc
expect_error char_transformer --amp foo
expect_error char_transformer --seed -1
expect_error char_transformer --heads 3
expect_error char_transformer --context 1
expect_error char_transformer --words /nonexistent
expect_error char_transformer --profile -1
# A tiny char_transformer run ends with valid JSON holding both losses; --profile 2 prints the
# op totals of the last two steps before it (linear and its backward mm among them).
out=$(timeout 120 "$bin/char_transformer" --steps 3 --layers 1 --embd 16 --heads 2 --context 8 --eval-windows 8 \
  --sample 2 --profile 2)
last=$(printf '%s\n' "$out" | tail -n 1)
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["val_loss"] > 0 and d["train_loss"] > 0, d' "$last" &&
   printf '%s\n' "$out" | grep -q '^op profile over the last 2 steps' &&
   printf '%s\n' "$out" | grep -qE ' us +[0-9.]+ calls  linear$' &&
   printf '%s\n' "$out" | grep -qE ' us +[0-9.]+ calls  backward mm$'; then
  echo "ok: char_transformer -> $last"
else
  echo "FAIL: char_transformer: $out"
  fail=1
fi
# A diverging run still ends with valid JSON (nan/inf become null).
last=$(timeout 60 "$bin/linear_regression" --lr 1000 --epochs 50 | tail -n 1)
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["final_loss"] is None, d' "$last"; then
  echo "ok: diverging run -> $last"
else
  echo "FAIL: not valid JSON with null: $last"
  fail=1
fi
last=$(timeout 60 "$bin/linear_regression" --epochs 50 | tail -n 1)
python3 -c 'import json,sys; json.loads(sys.argv[1])' "$last" || { echo "FAIL: $last"; fail=1; }
exit $fail
