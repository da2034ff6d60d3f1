#!/usr/bin/env bash
# Run on the development machine (Debian 12, packages from tools/setup-debian.sh) before
# tools/gpu-check runs on the device machine, which has CUDA, meson and ninja but none of the
# Debian packages. Copies what the build needs into the ignored folder .carry/ (about 45 MB):
#   .carry/include         fmt, doctest, CLI11, nlohmann and OpenBLAS headers
#   .carry/lib             libfmt, libopenblas and the Fortran runtime OpenBLAS needs
#   .carry/lib/pkgconfig   fmt.pc, openblas.pc, doctest.pc, relocatable through ${pcfiledir}
#   .carry/fallback        libstdc++/libgcc_s, used by gpu-check only if the device's are older
# Then, with the device tool: run(command="bash tools/gpu-check", carry=[".carry"]).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=.carry
rm -rf "$carry"
mkdir -p "$carry/include" "$carry/lib/pkgconfig" "$carry/fallback"

multiarch=$(gcc -print-multiarch)
libdir=/usr/lib/$multiarch
blas_inc=/usr/include/$multiarch/openblas-pthread
blas_lib=$libdir/openblas-pthread

cp -r /usr/include/fmt /usr/include/doctest /usr/include/CLI /usr/include/nlohmann "$carry/include/"
cp "$blas_inc"/*.h "$carry/include/"
# Plain files only (symlinks may not travel); tools/gpu-check makes the lib*.so links.
cp -L "$libdir/libfmt.so.9" "$carry/lib/libfmt.so.9"
cp -L "$blas_lib/libopenblas.so.0" "$carry/lib/libopenblas.so.0"
for so in libgfortran.so.5 libquadmath.so.0; do
  cp -L "$(gcc -print-file-name="$so")" "$carry/lib/$so" 2>/dev/null || cp -L "/lib/$multiarch/$so" "$carry/lib/$so"
done
for so in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(gcc -print-file-name="$so")" "$carry/fallback/$so"
done

fmt_version=$(pkg-config --modversion fmt)
blas_version=$(pkg-config --modversion openblas)
doctest_version=$(dpkg-query -W -f='${Version}' doctest-dev | sed 's/[~+-].*//')
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
cat > "$carry/lib/pkgconfig/doctest.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
Name: doctest
Description: doctest carried from the development machine
Version: $doctest_version
Cflags: -I\${includedir}
PC
echo "bundled into $carry: $(du -sh "$carry" | cut -f1)"
