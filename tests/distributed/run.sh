#!/usr/bin/env bash
# Runs the distributed suite under mpirun: run.sh MPIRUN NP BINARY [--throw-on-rank=K]. One thread
# per rank (the CI machine has 2 cores). With --throw-on-rank the job must fail, and fast.
set -u
mpirun=$1 np=$2 bin=$3
shift 3
"$bin" --probe-only=mpi >/dev/null 2>&1
[ $? -eq 77 ] && { echo "built without MPI: skipped"; exit 77; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HG_NUM_THREADS=1
args=(--allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ $# -gt 0 ]; then
  start=$(date +%s)
  "$mpirun" "${args[@]}" "$bin" "$@"
  rc=$?
  took=$(($(date +%s) - start))
  echo "mpirun exited with $rc after ${took} s"
  if [ "$rc" -eq 0 ]; then echo "FAIL: the job succeeded although a rank threw"; exit 1; fi
  if [ "$took" -gt 30 ]; then echo "FAIL: the failure took ${took} s (timeout 5 s)"; exit 1; fi
  exit 0
fi
exec "$mpirun" "${args[@]}" "$bin"
