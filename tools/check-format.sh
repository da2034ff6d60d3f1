#!/usr/bin/env bash
# Fails listing every C++ file that clang-format would change.
set -euo pipefail
root="${1:-$(git rev-parse --show-toplevel)}"
cd "$root"
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.h' -o -name '*.cpp')
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done
[ "$bad" -eq 0 ] && echo "format: ${#files[@]} files clean"
exit "$bad"
