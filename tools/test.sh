#!/usr/bin/env bash
# The test command (README and .ci/run): installs dependencies, builds, runs every suite
# (cpu, cuda — skipped without a GPU — and the format check), and ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-debian.sh
[ -d build ] || meson setup build
ninja -C build
status=0
meson test -C build --print-errorlogs --num-processes 1 || status=$?
# ASan+UBSan, libFuzzer and TSan runs (issue 14); HG_SKIP_SANITIZE=1 skips them locally.
logs=(build/meson-logs/testlog.json)
if [ "${HG_SKIP_SANITIZE:-0}" != 1 ]; then
  bash tools/sanitize.sh || status=1
  logs+=(build-asan/sanitize-log.json)
fi
# One closing line "N passed, N failed, N skipped" over every doctest case and meson test.
python3 - "${logs[@]}" <<'PY'
import json, re, sys
passed = failed = skipped = 0
lines = [line for path in sys.argv[1:] for line in open(path)]
for line in lines:
    t = json.loads(line)
    # (a filtered run prints no skipped count: the cases it leaves out are not skipped tests)
    m = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed(?:\s*\|\s*(\d+) skipped)?", t.get("stdout", ""))
    if m:
        passed += int(m.group(2)); failed += int(m.group(3)); skipped += int(m.group(4) or 0)
        if t["result"] not in ("OK", "SKIP") and int(m.group(3)) == 0:
            failed += 1
    elif t["result"] == "OK":
        passed += 1
    elif t["result"] == "SKIP":
        skipped += 1
    else:
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit "$status"
