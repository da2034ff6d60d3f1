#!/usr/bin/env bash
# The cuda suite alone, for a device check that must be short (docs/GPU.md): configures build-gpu
# as tools/gpu-check does, builds only tests/test_cuda (about 80 s on a 16-core device) and runs
# it with the given doctest arguments. After tools/gpu-bundle.sh here:
#   run(command="bash tools/gpu-suite.sh -tc='*conv*'", carry=[".carry"], timeout_s=240)
# Logs in $OUT (env.log, configure.log, build.log); the suite's output on stdout. The library
# paths tools/gpu-env.sh sets hold inside this script only: a later command in the same call
# that runs build-gpu/tests/test_cuda itself sources tools/gpu-env.sh and calls hg_gpu_env first.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
build=${GPU_CHECK_BUILD:-build-gpu}
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
# shellcheck source=tools/gpu-env.sh
. "$root/tools/gpu-env.sh"
hg_gpu_env "$root/.carry" "$root/$build-cudalibs" > "$out/env.log" 2>&1
if [ ! -d "$build" ]; then
  meson setup "$build" -Dnative=false "${HG_MESON_ARGS[@]}" > "$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
fi
t0=$SECONDS
ninja -C "$build" tests/test_cuda > "$out/build.log" 2>&1 ||
  { grep -m 10 -A8 -E "^FAILED:|error:" "$out/build.log"; exit 1; }
echo "built tests/test_cuda in $((SECONDS - t0)) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); commit $(cat .carry/COMMIT 2> /dev/null || echo unknown)"
"$build/tests/test_cuda" "$@"
