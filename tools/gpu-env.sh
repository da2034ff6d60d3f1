# shellcheck shell=bash
# Sourced (bash) by tools/gpu-check, tools/gpu-profile-cnn.sh and tools/simulate-gpu-image.sh:
# prepares the environment in
# which `meson setup -Dcuda=enabled -Dcudnn=enabled` works on a bare GPU image (CUDA toolkit,
# meson, ninja, PyTorch with its pip nvidia-* wheels; no Debian packages, maybe no pkg-config).
#
#   hg_gpu_env CARRY CUDALIBS
#
# CARRY is the folder tools/gpu-bundle.sh filled (.carry), CUDALIBS a scratch folder for links.
# It exports PATH, PKG_CONFIG_PATH, LIBRARY_PATH, CPATH, LD_LIBRARY_PATH and sets the array
# HG_MESON_ARGS (extra `meson setup` arguments). Messages go through `log` if the caller has one.
#
# The CUDA libraries: meson's find_library needs unversioned names (libcublasLt.so), and the pip
# wheels ship only versioned ones (nvidia/cu13/lib/libcublasLt.so.13, nvidia/cudnn/lib/
# libcudnn.so.9 and its sub-libraries) with the headers beside them (nvidia/*/include). For each
# of cudart, cublasLt and cudnn that the toolkit lacks (library or header), every lib*.so* of the
# folder that holds it is linked into CUDALIBS/lib with an unversioned name added, and its headers
# into CUDALIBS/include. LIBRARY_PATH makes find_library see them (meson asks the compiler for its
# search dirs) and puts the folder in the build's RUNPATH; one folder keeps cuDNN's $ORIGIN
# lookup of libcudnn_cnn.so.9 etc. working; CPATH (and -I in cuda_args) finds the headers.

_hg_log() { if declare -F log > /dev/null; then log "$@"; else echo "$@"; fi; }

# Site folders where pip's nvidia-* wheels may be: HG_NVIDIA_SITE first, then python's own
# site dirs, PyTorch's venv on the GPU image, and the usual system places.
_hg_sites() {
  [ -n "${HG_NVIDIA_SITE:-}" ] && echo "$HG_NVIDIA_SITE"
  if [ -z "${HG_NVIDIA_SITE_ONLY:-}" ]; then
    local py
    for py in python3 /opt/torch/.venv/bin/python3; do
      command -v "$py" > /dev/null 2>&1 &&
        "$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2> /dev/null
    done
    ls -d /opt/torch/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
      /usr/local/lib/python3*/site-packages /usr/lib/python3/dist-packages 2> /dev/null
  fi
}

# _hg_link_dir SRC_LIB_DIR: every lib*.so* of that folder into CUDALIBS/lib, plus unversioned
# names; its ../include/* into CUDALIBS/include.
_hg_link_dir() {
  local src=$1 f base
  for f in "$src"/lib*.so*; do
    [ -e "$f" ] || continue
    base=$(basename "$f")
    ln -sf "$f" "$_hg_libs/lib/$base"
    local plain=${base%%.so*}.so
    [ -e "$_hg_libs/lib/$plain" ] || ln -sf "$f" "$_hg_libs/lib/$plain"
  done
  if [ -d "$src/../include" ]; then
    for f in "$src"/../include/*; do
      [ -e "$f" ] && ln -sfn "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$_hg_libs/include/$(basename "$f")"
    done
  fi
}

# _hg_find_cuda_lib NAME HEADER: ok when the toolkit has both, else links them from the toolkit
# (versioned names only) or a wheel. Returns 1 when nothing was found.
_hg_find_cuda_lib() {
  local name=$1 header=$2 d site hit=
  local tk_lib=
  for d in "$_hg_cuda_root/lib64" "$_hg_cuda_root/lib" "$_hg_cuda_root/targets/x86_64-linux/lib"; do
    if [ -e "$d/lib$name.so" ]; then tk_lib=$d; break; fi
  done
  if [ -n "$tk_lib" ] && [ -e "$_hg_cuda_root/include/$header" ]; then
    _hg_log "- $name: toolkit ($tk_lib)"
    return 0
  fi
  # Versioned names only in the toolkit, with the header there too.
  for d in "$_hg_cuda_root/lib64" "$_hg_cuda_root/lib" "$_hg_cuda_root/targets/x86_64-linux/lib"; do
    if compgen -G "$d/lib$name.so.*" > /dev/null && [ -e "$_hg_cuda_root/include/$header" ]; then
      _hg_link_dir "$d"
      _hg_log "- $name: toolkit, versioned names only ($d), linked into $_hg_libs"
      return 0
    fi
  done
  while read -r site; do
    [ -d "$site/nvidia" ] || continue
    for d in "$site"/nvidia/*/lib; do
      if compgen -G "$d/lib$name.so*" > /dev/null && [ -e "$d/../include/$header" ]; then
        hit=$d
        break 2
      fi
    done
  done < <(_hg_sites)
  if [ -z "$hit" ]; then
    _hg_log "- $name: NOT FOUND (toolkit $_hg_cuda_root, pip wheels under: $(_hg_sites | tr '\n' ' '))"
    return 1
  fi
  _hg_link_dir "$hit"
  _hg_log "- $name: pip wheel ($(cd "$hit" && pwd)), linked into $_hg_libs"
}

hg_gpu_env() {
  local carry=$1
  _hg_libs=$2
  local rc=0
  HG_MESON_ARGS=(-Dcuda=enabled -Dcudnn=enabled)

  # pkg-config: the device's if it has one, else the carried pkgconf.
  if [ -d "$carry" ]; then
    carry=$(cd "$carry" && pwd)
    chmod +x "$carry/bin/pkg-config" "$carry/libexec/pkgconf" 2> /dev/null
    if ! command -v pkg-config > /dev/null; then
      export PATH=$carry/bin:$PATH
      _hg_log "- pkg-config: none on the device, using the carried pkgconf"
    fi
  fi
  command -v pkg-config > /dev/null || {
    _hg_log "- pkg-config: NOT FOUND (run tools/gpu-bundle.sh and carry .carry)"
    rc=1
  }

  # Dependencies: the system's, else .carry.
  local deps="fmt openblas sleef doctest nlohmann_json CLI11"
  # shellcheck disable=SC2086
  if [ -d "$carry" ] && ! pkg-config --exists $deps 2> /dev/null; then
    ln -sf libfmt.so.9 "$carry/lib/libfmt.so"
    ln -sf libopenblas.so.0 "$carry/lib/libopenblas.so"
    [ -e "$carry/lib/libsleef.so.3" ] && ln -sf libsleef.so.3 "$carry/lib/libsleef.so"
    export PKG_CONFIG_PATH=$carry/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LIBRARY_PATH=$carry/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The carried libfmt was built by gcc 12: if the system libstdc++ is older, use the carried one.
    local sys_stdcxx
    sys_stdcxx=$(c++ -print-file-name=libstdc++.so.6 2> /dev/null)
    if [ -z "$sys_stdcxx" ] || [ "$sys_stdcxx" = libstdc++.so.6 ]; then
      sys_stdcxx=$(ldconfig -p 2> /dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
    fi
    if ! grep -q GLIBCXX_3.4.30 "$sys_stdcxx" 2> /dev/null; then
      export LD_LIBRARY_PATH=$carry/fallback:$LD_LIBRARY_PATH
      _hg_log "- libstdc++: the system's (${sys_stdcxx:-not found}) lacks GLIBCXX_3.4.30, using the carried one"
    fi
    _hg_log "- dependencies: from $carry (tools/gpu-bundle.sh)"
  else
    _hg_log "- dependencies: system (pkg-config)"
  fi
  local dep
  for dep in $deps; do
    pkg-config --exists "$dep" 2> /dev/null || {
      _hg_log "- $dep: NOT FOUND by pkg-config"
      rc=1
    }
  done

  # CUDA: the toolkit of the nvcc on PATH (as kernels/meson.build derives it), then the wheels.
  local nvcc
  nvcc=$(command -v nvcc) || {
    _hg_log "- nvcc: NOT FOUND on PATH ($PATH)"
    return 1
  }
  _hg_cuda_root=$(dirname "$(dirname "$nvcc")")
  rm -rf "$_hg_libs"
  mkdir -p "$_hg_libs/lib" "$_hg_libs/include"
  _hg_libs=$(cd "$_hg_libs" && pwd)
  _hg_find_cuda_lib cudart cuda_runtime.h || rc=1
  _hg_find_cuda_lib cublasLt cublasLt.h || rc=1
  _hg_find_cuda_lib cudnn cudnn.h || rc=1
  # NCCL is optional: without it the CUDA module builds and CUDA collectives say NCCL is missing.
  _hg_find_cuda_lib nccl nccl.h || _hg_log "- nccl: the build goes on without the NCCL backend"
  if compgen -G "$_hg_libs/lib/*" > /dev/null; then
    export LIBRARY_PATH=$_hg_libs/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$_hg_libs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export CPATH=$_hg_libs/include${CPATH:+:$CPATH}
    HG_MESON_ARGS+=("-Dcuda_args=-I$_hg_libs/include")
  fi
  return $rc
}

# hg_pack_logs OUT ARCHIVE KEEP...: every plain file in OUT except the KEEP names goes into
# OUT/ARCHIVE (gzipped tar) and is removed. The device tool brings back at most 8 files from
# $OUT, and the scripts that run there write more logs than that (gpu-check's 14 crowded out its
# own report on 2026-11-26); they call this on exit.
hg_pack_logs() {
  local out=$1 archive=$2
  shift 2
  local logs=() f name k keep
  for f in "$out"/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    keep=0
    for k in "$archive" "$@"; do [ "$name" = "$k" ] && keep=1; done
    [ $keep -eq 1 ] || logs+=("$name")
  done
  [ ${#logs[@]} -gt 0 ] || return 0
  tar -C "$out" -czf "$out/$archive" "${logs[@]}" && (cd "$out" && rm -f "${logs[@]}")
}
