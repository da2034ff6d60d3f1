# Sourced by the PyTorch twin tests: sets $python to the first of /usr/bin/python3, python3 that
# imports torch. Without one it fails, naming the fix, unless HG_TEST_WITHOUT_TORCH=1 asks to
# skip (exit 77).
python=""
for p in /usr/bin/python3 python3; do
  if "$p" -c "import torch" >/dev/null 2>&1; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  if [ "${HG_TEST_WITHOUT_TORCH:-0}" = 1 ]; then
    echo "no python with torch: skipped (HG_TEST_WITHOUT_TORCH=1)"
    exit 77
  fi
  echo "no python with torch (tried /usr/bin/python3, python3): install python3-torch (tools/setup-debian.sh)," \
    "or set HG_TEST_WITHOUT_TORCH=1 to skip the PyTorch twin tests"
  exit 1
fi
