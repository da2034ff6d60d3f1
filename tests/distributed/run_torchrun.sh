#!/usr/bin/env bash
# Starts the distributed suite torchrun-style, without mpirun: NP processes with RANK,
# WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, so the group runs over Gloo.
#   run_torchrun.sh NP BINARY              the suite; fails if any rank fails
#   run_torchrun.sh NP BINARY --throw-on-rank=K | --peer-never-joins   must fail (or pass) fast
#   run_torchrun.sh 2 BINARY --bad-environment   malformed variables and a missing rank 0
#   run_torchrun.sh 2 BINARY --hostile   a job that must succeed while a client attacks its store
set -u
np=$1 bin=$2
shift 2
"$bin" --probe-only=gloo >/dev/null 2>&1
[ $? -eq 77 ] && { echo "built without Gloo: skipped"; exit 77; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HG_NUM_THREADS=1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# launch ARGS...: starts np ranks, waits for all; sets rcs (one exit code per rank) and took.
launch() {
  local port pids=() r start
  port=$(free_port)
  start=$(date +%s)
  for ((r = 0; r < np; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" "$@" >"$logs/$r" 2>&1 &
    pids+=($!)
  done
  rcs=()
  for ((r = 0; r < np; r++)); do
    wait "${pids[$r]}"
    rcs+=($?)
  done
  took=$(($(date +%s) - start))
  for ((r = 0; r < np; r++)); do
    echo "--- rank $r exited with ${rcs[$r]}"
    if [ "$r" -eq 0 ] || [ "${rcs[$r]}" -ne 0 ]; then tail -n 40 "$logs/$r"; fi
  done
}

# expect_error NAME TEXT ENV...: one process of a 2-rank job with the given variables must exit
# non-zero within 10 s, printing TEXT.
expect_error() {
  local name=$1 text=$2 out rc start
  shift 2
  start=$(date +%s)
  out=$(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$@" "$bin" --init-only 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] || ! grep -qF -- "$text" <<<"$out" || [ $(($(date +%s) - start)) -gt 10 ]; then
    echo "FAIL ($name): wanted a fast failure saying '$text', got rc $rc:"
    echo "$out"
    return 1
  fi
  echo "ok ($name): $(grep -F -- "$text" <<<"$out" | head -n 1)"
}

case "${1:-}" in
  --throw-on-rank=*)
    launch "$@"
    if [[ " ${rcs[*]} " == *" 0 "* ]]; then echo "FAIL: a rank succeeded although a peer threw"; exit 1; fi
    if [ "$took" -gt 30 ]; then echo "FAIL: the failure took ${took} s (timeout 5 s)"; exit 1; fi
    echo "every rank failed, after ${took} s"
    ;;
  --bad-environment)
    status=0
    port=$(free_port)
    expect_error "RANK out of range" "RANK='2' must be an integer in [0, 1]" \
      RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" || status=1
    expect_error "no MASTER_ADDR" "MASTER_ADDR is not set" RANK=1 WORLD_SIZE=2 MASTER_PORT="$port" || status=1
    expect_error "bad MASTER_PORT" "MASTER_PORT='http' must be an integer" \
      RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=http || status=1
    expect_error "no RANK" "RANK is not set" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" || status=1
    expect_error "unknown MASTER_ADDR" "MASTER_ADDR 'bad host!' cannot be resolved" \
      RANK=1 WORLD_SIZE=2 MASTER_ADDR='bad host!' MASTER_PORT="$port" || status=1
    expect_error "rank 0 never starts" "could not reach MASTER_ADDR:MASTER_PORT = 127.0.0.1:$port" \
      RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" || status=1
    expect_error "rank 1 never starts" "was not set at 127.0.0.1:$port within 2 s" \
      RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" || status=1
    # A job of one over Gloo needs no store.
    out=$(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT RANK=0 WORLD_SIZE=1 "$bin" --init-only 2>&1)
    grep -qF "rank 0 of 1 over gloo" <<<"$out" && echo "ok (world of one): $out" || { echo "FAIL (world of one): $out"; status=1; }
    exit "$status"
    ;;
  --hostile)
    # The attacker starts with the job and stops by itself (bounded counts, at most 240 s).
    export HG_TEST_ATTACK_DIR=$logs
    port=$(free_port)
    MASTER_PORT=$port "$bin" --hostile-client >"$logs/hostile" 2>&1 &
    attacker=$!
    pids=()
    for ((r = 0; r < np; r++)); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" --under-attack \
        >"$logs/$r" 2>&1 &
      pids+=($!)
    done
    status=0
    for ((r = 0; r < np; r++)); do
      wait "${pids[$r]}" || status=1
      echo "--- rank $r"
      tail -n 20 "$logs/$r"
    done
    wait "$attacker" || status=1
    echo "--- hostile client"
    cat "$logs/hostile"
    exit "$status"
    ;;
  *)
    launch "$@"
    for rc in "${rcs[@]}"; do [ "$rc" -eq 0 ] || exit 1; done
    ;;
esac
