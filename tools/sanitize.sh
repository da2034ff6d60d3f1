#!/usr/bin/env bash
# The sanitizer and fuzz runs of CI (issue 14), called by tools/test.sh on every run:
#   1. ASan+UBSan (clang 14, code also instrumented for libFuzzer), CUDA off, unity build:
#      test_reliability (bad inputs, saves killed midway, threads) and the cpu suite.
#   2. libFuzzer, same build: each target in tests/fuzz runs $FUZZ_SECONDS over its committed seed
#      corpus (tests/fuzz/corpus/<target>), then replays every input in tests/data/bad-inputs.
#   3. ThreadSanitizer (oneDNN off: libgomp is not instrumented): the threaded tests.
# Each result is written as one JSON line (the shape of meson's testlog.json) to
# build-asan/sanitize-log.json, so tools/test.sh counts it in its closing summary line. Exits
# non-zero when anything fails. Only the needed targets are built.
# Local use: bash tools/sanitize.sh  (FUZZ_SECONDS=300 for a longer fuzz; SANITIZE_CPU_SUITE=0
# to skip the cpu suite under ASan).
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-40}
SANITIZE_CPU_SUITE=${SANITIZE_CPU_SUITE:-1}
# Through ccache when present (meson adds it only to compilers it finds itself, not to CC/CXX).
if command -v ccache >/dev/null 2>&1; then
  export CC="ccache clang-14" CXX="ccache clang++-14"
else
  export CC=clang-14 CXX=clang++-14
fi
asan=build-asan
tsan=build-tsan
mkdir -p "$asan"
log=$asan/sanitize-log.json
: >"$log"
status=0

# record NAME RC OUTPUT_FILE SECONDS: appends a result line for tools/test.sh's summary.
record() {
  python3 - "$log" "$1" "$2" "$3" "$4" <<'PY'
import json, sys
log, name, rc, out, secs = sys.argv[1:]
text = open(out, errors="replace").read()[-20000:]
with open(log, "a") as f:
    f.write(json.dumps({"name": name, "result": "OK" if rc == "0" else "FAIL", "duration": float(secs),
                        "stdout": text}) + "\n")
PY
  if [ "$2" != 0 ]; then
    status=1
    echo "sanitize: $1 FAILED (rc $2); output:"
    tail -n 60 "$3"
  else
    echo "sanitize: $1 ok (${4}s)"
  fi
}

# run NAME COMMAND...: runs the command, recording its result and wall time.
run() {
  local name=$1 out rc start
  shift
  out=$(mktemp)
  start=$(date +%s)
  "$@" >"$out" 2>&1
  rc=$?
  record "$name" "$rc" "$out" "$(($(date +%s) - start))"
  rm -f "$out"
}

# configure DIR CPP_ARGS ARGS...: sets up a build directory once. -O1 with line tables only (not
# debugoptimized's -O2 -g): a sanitizer report still names file and line, and the two cold builds
# compile in much less time on CI's 2 cores.
configure() {
  local dir=$1 cpp_args=$2
  shift 2
  [ -f "$dir/build.ninja" ] || meson setup "$dir" -Dcuda=disabled -Dunity=on -Dbuildtype=plain -Doptimization=1 \
    -Db_ndebug=false -Db_lundef=false "-Dcpp_args=['-gline-tables-only'$cpp_args]" "$@"
}

t0=$(date +%s)
# ---- 1. ASan + UBSan ----------------------------------------------------------------------
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan_targets=(tests/test_reliability tests/fuzz_safetensors tests/fuzz_idx tests/fuzz_checkpoint tests/fuzz_store
  tests/fuzz_vocab tests/fuzz_token_file)
[ "$SANITIZE_CPU_SUITE" = 1 ] && asan_targets+=(tests/test_cpu)
build_asan() {
  configure "$asan" ",'-fsanitize=fuzzer-no-link','-fno-sanitize-recover=all'" -Db_sanitize=address,undefined \
    -Dfuzz=true && ninja -C "$asan" "${asan_targets[@]}"
}
run asan_build build_asan
if [ -x "$asan/tests/test_reliability" ]; then
  run asan_reliability "$asan/tests/test_reliability"
  [ "$SANITIZE_CPU_SUITE" = 1 ] && run asan_cpu env HG_CHECK_GRADCHECK_COVERAGE=1 "$asan/tests/test_cpu"
  # ---- 2. libFuzzer ----------------------------------------------------------------------
  for target in safetensors idx checkpoint store vocab token_file; do
    work=$(mktemp -d)
    mkdir -p "$asan/fuzz-artifacts"
    run "fuzz_$target" "$asan/tests/fuzz_$target" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=4096 \
      -artifact_prefix="$asan/fuzz-artifacts/$target-" "$work" "tests/fuzz/corpus/$target"
    rm -rf "$work"
  done
  # Every crashing input found so far, replayed once through its target.
  run replay_safetensors "$asan/tests/fuzz_safetensors" tests/data/bad-inputs/safetensors/*
  run replay_idx "$asan/tests/fuzz_idx" tests/data/bad-inputs/idx/*
  run replay_checkpoint "$asan/tests/fuzz_checkpoint" tests/data/bad-inputs/checkpoint/* \
    tests/data/bad-inputs/safetensors/*
  run replay_vocab "$asan/tests/fuzz_vocab" tests/data/bad-inputs/gpt2-vocab/*
fi
t1=$(date +%s)

# ---- 3. ThreadSanitizer -------------------------------------------------------------------
build_tsan() {
  configure "$tsan" "" -Db_sanitize=thread -Donednn=disabled && ninja -C "$tsan" tests/test_reliability
}
run tsan_build build_tsan
if [ -x "$tsan/tests/test_reliability" ]; then
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 run tsan_threads "$tsan/tests/test_reliability" -tc='threads:*' -nss
fi
t2=$(date +%s)
echo "sanitize: asan+fuzz $((t1 - t0))s, tsan $((t2 - t1))s, total $((t2 - t0))s"
exit "$status"
