#!/usr/bin/env bash
# Run on the development machine (Debian 12, packages from tools/setup-debian.sh) before
# tools/gpu-check runs on the device machine, which has CUDA, meson and ninja (and PyTorch with
# its pip nvidia-* wheels) but none of the Debian packages, possibly not even pkg-config.
# Copies what the build needs into the ignored folder .carry/ (about 56 MB with MNIST; the device tool
# carries at most 64 MiB):
#   .carry/include         fmt, doctest, CLI11, nlohmann, OpenBLAS and SLEEF headers
#   .carry/lib             libfmt, libopenblas, the Fortran runtime OpenBLAS needs, libsleef
#   .carry/lib/pkgconfig   fmt, openblas, sleef, doctest, nlohmann_json, CLI11 .pc files, relocatable
#                          through ${pcfiledir}
#   .carry/bin/pkg-config  Debian's pkgconf (+ libpkgconf in .carry/libexec), put on PATH by
#                          tools/gpu-env.sh only when the device has no pkg-config
#   .carry/fallback        libstdc++/libgcc_s, used by gpu-check only if the device's are older
#   .carry/COMMIT          the commit being checked (the device's copy of the tree has no .git)
#   .carry/mnist           the four MNIST files gzipped (about 11 MB), when datasets/mnist holds them,
#                          so gpu-check can train the examples on the device (it cannot download)
# Then, with the device tool: run(command="bash tools/gpu-check", carry=[".carry"]).
# Usage: tools/gpu-bundle.sh [DEST]   (DEST defaults to .carry; tools/simulate-gpu-image.sh
# bundles into a scratch folder)
set -euo pipefail
cd "$(dirname "$0")/.."
carry=${1:-.carry}
rm -rf "$carry"
mkdir -p "$carry/include" "$carry/lib/pkgconfig" "$carry/fallback" "$carry/bin" "$carry/libexec"

multiarch=$(gcc -print-multiarch)
libdir=/usr/lib/$multiarch
blas_inc=/usr/include/$multiarch/openblas-pthread
blas_lib=$libdir/openblas-pthread

cp -r /usr/include/fmt /usr/include/doctest /usr/include/CLI /usr/include/nlohmann "$carry/include/"
cp "$blas_inc"/*.h "$carry/include/"
# SLEEF: without it the CPU elementwise kernels fall back to libm, whose float32 tanh is
# outside the bounds the cpu suite checks (2.04 ULP measured with Ubuntu 24.04's glibc).
cp "/usr/include/$multiarch/sleef.h" "$carry/include/"
cp -L "$libdir/libsleef.so.3" "$carry/lib/libsleef.so.3"
# Plain files only (symlinks may not travel); tools/gpu-check makes the lib*.so links.
cp -L "$libdir/libfmt.so.9" "$carry/lib/libfmt.so.9"
cp -L "$blas_lib/libopenblas.so.0" "$carry/lib/libopenblas.so.0"
for so in libgfortran.so.5 libquadmath.so.0; do
  cp -L "$(gcc -print-file-name="$so")" "$carry/lib/$so" 2>/dev/null || cp -L "/lib/$multiarch/$so" "$carry/lib/$so"
done
for so in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(gcc -print-file-name="$so")" "$carry/fallback/$so"
done
# pkg-config for an image without one: Debian's pkgconf and its library, behind a wrapper that
# finds the library next to it (LD_LIBRARY_PATH for pkgconf alone, not for the build).
cp -L "$(command -v pkgconf)" "$carry/libexec/pkgconf"
cp -L "$(ldd "$(command -v pkgconf)" | awk '/libpkgconf/ {print $3}')" "$carry/libexec/"
cat > "$carry/bin/pkg-config" <<'SH'
#!/bin/sh
# Carried by tools/gpu-bundle.sh: Debian's pkgconf with its libpkgconf next to it.
libexec=$(cd "$(dirname "$0")/../libexec" && pwd)
LD_LIBRARY_PATH=$libexec${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$libexec/pkgconf" "$@"
SH
chmod +x "$carry/bin/pkg-config" "$carry/libexec/pkgconf"
{
  git rev-parse --short HEAD 2>/dev/null || echo unknown
  if git status --porcelain 2>/dev/null | grep -q .; then echo "(with local changes)"; fi
} | tr '\n' ' ' | sed 's/ $//' > "$carry/COMMIT"

fmt_version=$(pkg-config --modversion fmt)
blas_version=$(pkg-config --modversion openblas)
doctest_version=$(dpkg-query -W -f='${Version}' doctest-dev | sed 's/[~+-].*//')
json_version=$(pkg-config --modversion nlohmann_json)
cli11_version=$(pkg-config --modversion CLI11)
sleef_version=$(pkg-config --modversion sleef)
cat > "$carry/lib/pkgconfig/fmt.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: fmt
Description: fmt carried from the development machine
Version: $fmt_version
Libs: -L\${libdir} -lfmt
Cflags: -I\${includedir}
PC
cat > "$carry/lib/pkgconfig/openblas.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: openblas
Description: OpenBLAS carried from the development machine
Version: $blas_version
Libs: -L\${libdir} -lopenblas
Libs.private: -lm -lpthread -lgfortran
Cflags: -I\${includedir}
PC
cat > "$carry/lib/pkgconfig/sleef.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: SLEEF
Description: SLEEF carried from the development machine
Version: $sleef_version
Libs: -L\${libdir} -lsleef
Cflags: -I\${includedir}
PC
cat > "$carry/lib/pkgconfig/doctest.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
Name: doctest
Description: doctest carried from the development machine
Version: $doctest_version
Cflags: -I\${includedir}
PC
# Header-only: meson's dependency('nlohmann_json') and dependency('CLI11') need only these.
cat > "$carry/lib/pkgconfig/nlohmann_json.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
Name: nlohmann_json
Description: JSON for Modern C++, carried from the development machine
Version: $json_version
Cflags: -I\${includedir}
PC
cat > "$carry/lib/pkgconfig/CLI11.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
Name: CLI11
Description: C++ command line parser, carried from the development machine
Version: $cli11_version
Cflags: -I\${includedir}
PC
# MNIST for the examples' CUDA runs: gzipped, it fits beside the rest under the 64 MiB limit
# (HG_BUNDLE_MNIST=0 leaves it out, as tools/simulate-gpu-image.sh does).
if [ "${HG_BUNDLE_MNIST:-1}" != 1 ]; then
  echo "gpu-bundle: MNIST left out (HG_BUNDLE_MNIST=$HG_BUNDLE_MNIST); gpu-check will skip the examples"
elif bash tools/fetch-mnist.sh datasets/mnist > /dev/null 2>&1; then
  mkdir -p "$carry/mnist"
  for f in datasets/mnist/*-ubyte; do gzip -9 -c "$f" > "$carry/mnist/$(basename "$f").gz"; done
else
  echo "gpu-bundle: no MNIST (tools/fetch-mnist.sh failed); gpu-check will skip the examples" >&2
fi
echo "bundled into $carry: $(du -sh "$carry" | cut -f1)"
