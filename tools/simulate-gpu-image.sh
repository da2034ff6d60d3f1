#!/usr/bin/env bash
# Proves on a machine without a GPU that tools/gpu-check's configure step works on the GPU image:
# CUDA 13 toolkit + PyTorch, no Debian packages, no pkg-config, cuBLASLt/cuDNN only as pip wheels
# (versioned names only). Builds that image's environment in a scratch folder:
#   - the bundle from tools/gpu-bundle.sh (as carried to the device);
#   - a toolkit without cuBLAS/cuDNN (links to this machine's, minus those files);
#   - a wheel-like site: nvidia/cu13/{lib,include} and nvidia/cudnn/{lib,include}, versioned
#     library names only (links to this machine's files);
#   - PATH with no pkg-config/pkgconf and no cmake, PKG_CONFIG_LIBDIR an empty folder (no system
#     .pc files);
# then runs the same tools/gpu-env.sh gpu-check runs and `meson setup` with its arguments, checks
# cuBLASLt and cuDNN came from the wheel folder, and compiles one .cu file against the wheel's
# headers. Run by CI (meson test gpu_image_simulation).
# Exit: 0 pass, 1 fail, 77 skipped (no CUDA toolkit, cuBLASLt/cuDNN or pkgconf here to copy).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
real=$(readlink -f "${HG_SIM_CUDA:-/usr/local/cuda}")
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ -x "$real/bin/nvcc" ] || skip "no CUDA toolkit at $real"
command -v pkgconf > /dev/null || skip "no pkgconf to bundle"
real_lib=
for d in "$real/lib64" "$real/lib" "$real/targets/x86_64-linux/lib"; do
  if compgen -G "$d/libcublasLt.so.*" > /dev/null && compgen -G "$d/libcudnn.so.*" > /dev/null; then
    real_lib=$(readlink -f "$d")
    break
  fi
done
[ -n "$real_lib" ] || skip "no cuBLASLt/cuDNN next to $real to build a wheel-like site from"
real_inc=$(readlink -f "$real/include")
[ -e "$real_inc/cudnn.h" ] && [ -e "$real_inc/cublasLt.h" ] || skip "no cudnn.h/cublasLt.h in $real_inc"

work=$(mktemp -d "${TMPDIR:-/tmp}/hg-gpu-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS

# 1. The bundle, made with this machine's tools.
HG_BUNDLE_MNIST=0 bash "$src/tools/gpu-bundle.sh" "$work/tree/.carry" > "$work/bundle.log" 2>&1 || {
  cat "$work/bundle.log"
  echo "FAIL: tools/gpu-bundle.sh failed"
  exit 1
}

# 2. A toolkit without cuBLAS, cuDNN and NCCL. `link_filtered SRC DST`: DST gets a link to each
# entry of SRC except their files.
link_filtered() {
  mkdir -p "$2"
  local f
  for f in "$1"/*; do
    case $(basename "$f") in libcublas* | libcudnn* | libnccl* | cublas* | cudnn* | nccl*) continue ;; esac
    ln -s "$(readlink -f "$f")" "$2/$(basename "$f")"
  done
}
cuda=$work/cuda
mkdir -p "$cuda"
# bin is a real folder of links: nvcc finds its headers at <its folder>/../targets/.../include,
# and through a linked folder ".." would lead back to this machine's toolkit.
link_filtered "$real/bin" "$cuda/bin"
[ -d "$real/nvvm" ] && ln -s "$real/nvvm" "$cuda/nvvm"
link_filtered "$real_inc" "$cuda/include"
link_filtered "$real_lib" "$cuda/lib64"
ln -s lib64 "$cuda/lib"
mkdir -p "$cuda/targets/x86_64-linux"
ln -s ../../include "$cuda/targets/x86_64-linux/include"
ln -s ../../lib64 "$cuda/targets/x86_64-linux/lib"

# 3. The wheels, as pip lays them out (nvidia-cublas, nvidia-cudnn-cu13): versioned names only.
site=$work/site-packages
wheel() {  # wheel DIR LIBGLOB HEADERGLOB
  mkdir -p "$site/nvidia/$1/lib" "$site/nvidia/$1/include"
  local f
  for f in "$real_lib"/$2; do
    case $f in *.so) continue ;; esac
    ln -s "$(readlink -f "$f")" "$site/nvidia/$1/lib/$(basename "$f")"
  done
  for f in "$real_inc"/$3; do ln -s "$(readlink -f "$f")" "$site/nvidia/$1/include/$(basename "$f")"; done
}
wheel cu13 'libcublas*.so.*' 'cublas*'
wheel cudnn 'libcudnn*.so.*' 'cudnn*'
# NCCL when this toolkit has it (nvidia-nccl-cu13: nvidia/nccl/{lib,include}).
has_nccl=0
if compgen -G "$real_lib/libnccl.so.*" > /dev/null && [ -e "$real_inc/nccl.h" ]; then
  wheel nccl 'libnccl*.so.*' 'nccl*'
  has_nccl=1
fi
if compgen -G "$site/nvidia/*/lib/*.so" > /dev/null; then
  echo "FAIL: the simulated wheels have unversioned names"
  exit 1
fi

# 4. PATH without pkg-config or cmake; no .pc files but the carried ones.
bin=$work/bin
mkdir -p "$bin"
for d in /usr/local/bin /usr/bin /bin; do
  for f in "$d"/*; do
    name=$(basename "$f")
    case $name in *pkg-config | pkgconf | cmake | nvcc) continue ;; esac
    [ -e "$bin/$name" ] || ln -s "$f" "$bin/$name"
  done
done
mkdir -p "$work/no-pc"
# The tree as the device sees it: the sources plus .carry, no .git.
for f in "$src"/*; do ln -s "$f" "$work/tree/$(basename "$f")"; done

echo "simulated image ready in $((SECONDS - t0)) s: toolkit $cuda, wheels $site"
(
  export PATH=$cuda/bin:$bin
  export PKG_CONFIG_LIBDIR=$work/no-pc
  unset PKG_CONFIG_PATH LIBRARY_PATH CPATH LD_LIBRARY_PATH CMAKE_PREFIX_PATH
  export HG_NVIDIA_SITE=$site
  if command -v pkg-config cmake > /dev/null; then
    echo "FAIL: pkg-config or cmake is still on the simulated PATH"
    exit 1
  fi
  cd "$work/tree"
  # shellcheck source=tools/gpu-env.sh
  . tools/gpu-env.sh
  hg_gpu_env "$work/tree/.carry" "$work/tree/build-gpu-cudalibs" || echo "(gpu-env reported something missing)"
  echo "meson setup ${HG_MESON_ARGS[*]}"
  meson setup "$work/build" "$work/tree" -Dnative=false -Donednn=disabled "${HG_MESON_ARGS[@]}" > "$work/setup.log" 2>&1 || {
    tail -30 "$work/setup.log"
    echo "FAIL: meson setup failed in the simulated GPU image"
    exit 1
  }
) || exit 1

log=$work/setup.log
grep -E "Library (cudart|cublasLt|cudnn|nccl) found|Has header \"cudnn.h\"|CUDA backend|cuDNN|Run-time dependency" "$log"
fail=0
for want in 'Library cublasLt found: YES' 'Library cudnn found: YES' 'Has header "cudnn.h" : YES' \
  'Run-time dependency nlohmann_json found: YES' 'Run-time dependency cli11 found: YES'; do
  grep -qF "$want" "$log" || {
    echo "FAIL: the configure log lacks '$want'"
    fail=1
  }
done
if [ $has_nccl -eq 1 ]; then
  grep -qF 'Library nccl found: YES' "$log" && grep -qE "NCCL *: *(True|YES)" "$log" || {
    echo "FAIL: NCCL (from the simulated nvidia-nccl wheel) was not found"
    fail=1
  }
fi
grep -qE "cuDNN *: *(True|YES)" "$log" || {
  echo "FAIL: cuDNN is not on in the summary"
  fail=1
}
# The libraries must come from the wheel folder's links, written into the RUNPATH.
grep -q "build-gpu-cudalibs/lib" "$work/build/build.ninja" || {
  echo "FAIL: build.ninja does not link against build-gpu-cudalibs/lib (cuBLASLt/cuDNN not taken from the wheels)"
  fail=1
}
[ -L "$work/tree/build-gpu-cudalibs/lib/libcublasLt.so" ] && [ -L "$work/tree/build-gpu-cudalibs/lib/libcudnn.so" ] || {
  echo "FAIL: no unversioned links for cuBLASLt/cuDNN"
  fail=1
}
# Then compile one CUDA object that includes cublasLt.h and cudnn.h, which the simulated toolkit
# lacks (they come from the wheel through -I/CPATH); 15-60 s. HG_SIM_COMPILE=0 skips it.
if [ $fail -eq 0 ] && [ "${HG_SIM_COMPILE:-1}" != 0 ]; then
  (
    export PATH=$cuda/bin:$bin
    export CPATH=$work/tree/build-gpu-cudalibs/include
    targets=(kernels/libhg_kernels_cuda.a.p/cuda_runtime.cu.o)
    [ $has_nccl -eq 1 ] && targets+=(distributed/libhg_distributed_nccl.a.p/nccl_backend.cpp.o)
    ninja -C "$work/build" "${targets[@]}" > "$work/compile.log" 2>&1
  ) || {
    tail -20 "$work/compile.log"
    echo "FAIL: nvcc could not compile against the wheel headers"
    fail=1
  }
  grep -q "build-gpu-cudalibs/include" "$work/build/build.ninja" || {
    echo "FAIL: the wheel include folder is not on the nvcc command line"
    fail=1
  }
  [ $fail -eq 0 ] && echo "compiled kernels/cuda/runtime.cu against the wheel's cublasLt.h/cudnn.h$([ $has_nccl -eq 1 ] && echo ', distributed/nccl_backend.cpp against its nccl.h')"
fi
[ $fail -eq 0 ] || exit 1
echo "PASS: meson setup -Dcuda=enabled -Dcudnn=enabled in the simulated GPU image ($((SECONDS - t0)) s)"
