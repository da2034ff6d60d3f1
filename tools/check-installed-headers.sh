#!/usr/bin/env bash
# Installs halfgrad into a scratch prefix and checks that the installed headers are the user API
# only: no kernels/ header, no dispatch-stub declaration or kernel plumbing, every quoted include
# resolvable inside the install, and each header compiling on its own against the install alone.
set -euo pipefail
build="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --quiet >/dev/null
inc=$(find "$work/root" -type d -path '*/include/halfgrad' | head -1)
[ -n "$inc" ] || { echo "no include/halfgrad in the install"; exit 1; }
cd "$inc"
bad=0
if [ -e kernels ]; then
  echo "installed: kernels/ (backend code is not user API)"; bad=1
fi
while IFS= read -r h; do
  if grep -Eq 'HG_DECLARE_STUB\(|HG_DEFINE_STUB\(|HG_REGISTER_KERNEL\(|DispatchStub<' "$h"; then
    echo "installed header declares kernel plumbing: $h"; bad=1
  fi
  case "$h" in
    *_kernels.h | ./framework/dispatch.h | ./framework/ops/internal.h | ./framework/op.h | ./framework/view_history.h | \
      ./framework/cuda_backend.h | ./framework/capture_state.h | ./amp/policy.h | ./amp/autocast_hook.h | ./distributed/backend.h)
      echo "installed internal header: $h"; bad=1 ;;
  esac
  # The op-call plumbing by name, wherever it might be declared again.
  if grep -Eq '^(class|struct) (OpCall|AutogradHooks)\b|set_autocast_hook\(|\bWidenedGradientGuard\b|\bCurrentBackwardNodeGuard\b' "$h"; then
    echo "installed header declares op-call plumbing: $h"; bad=1
  fi
  while IFS= read -r dep; do
    [ -f "$dep" ] || { echo "$h includes \"$dep\", which is not installed"; bad=1; }
  done < <(sed -n 's/^#include "\(.*\)"/\1/p' "$h")
done < <(find . -name '*.h' | sort)
[ "$bad" -eq 0 ] || exit 1
# Each header on its own (fmt is the one outside dependency the API exposes).
find . -name '*.h' -printf '%P\n' | sort |
  xargs -P 2 -I{} sh -c 'echo "#include \"{}\"" | ${CXX:-g++} -std=c++20 -fsyntax-only -I. -x c++ - || { echo "does not compile alone: {}"; exit 255; }'
echo "installed headers: $(find . -name '*.h' | wc -l) user-API headers, no kernel plumbing, each compiles alone"
