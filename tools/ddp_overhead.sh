#!/usr/bin/env bash
# The per-step cost of data parallelism on one machine: each example trained by 1 process with 2
# threads against 2 ranks with 1 thread each (the same cores, the same global batch), over MPI
# (mpirun) and over Gloo (torchrun-style variables), plus the bare all-reduce of the MLP's
# gradients in float32 and bf16. Prints one JSON line per run. Needs datasets/mnist (tools/fetch-mnist.sh).
#   tools/ddp_overhead.sh [BUILD=build] [TRANSFORMER_STEPS=150]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} steps=${2:-150}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none --mca btl self,vader
     --mca btl_vader_single_copy_mechanism none -x HG_NUM_THREADS=1 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
port=29600
gloo() {  # gloo CMD...: two ranks torchrun-style, rank 0's output
  port=$((port + 1))
  HG_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port "$@" >/dev/null &
  HG_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port "$@"
  wait
}
run() {  # run LABEL CMD...: the command's last JSON line, labelled
  local label=$1
  shift
  echo "{\"run\":\"$label\",\"result\":$("$@" 2>/dev/null | grep '^{' | tail -n 1)}"
}
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%FT%TZ)"
for b in f32 bf16 bf16-f32; do
  run "allreduce 2.68MB $b mpi" "${mpi[@]}" "$build/tools/bench_allreduce" 2.68 50 "$b"
  run "allreduce 2.68MB $b gloo" gloo "$build/tools/bench_allreduce" 2.68 50 "$b"
done
mnist=(--data datasets/mnist --epochs 1 --device cpu)
for ex in mnist_mlp mnist_cnn; do
  run "$ex 1 rank x 2 threads" env HG_NUM_THREADS=2 "$build/examples/$ex" "${mnist[@]}"
  run "$ex 2 ranks x 1 thread mpi" "${mpi[@]}" "$build/examples/$ex" "${mnist[@]}" --distributed
  run "$ex 2 ranks x 1 thread gloo" gloo "$build/examples/$ex" "${mnist[@]}" --distributed
done
tf=(--steps "$steps" --device cpu)
run "char_transformer 1 rank x 2 threads" env HG_NUM_THREADS=2 "$build/examples/char_transformer" "${tf[@]}"
run "char_transformer 2 ranks x 1 thread mpi" "${mpi[@]}" "$build/examples/char_transformer" "${tf[@]}" --distributed
run "char_transformer 2 ranks x 1 thread gloo" gloo "$build/examples/char_transformer" "${tf[@]}" --distributed
