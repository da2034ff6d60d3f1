#!/usr/bin/env bash
# Builds tests/external/contract.cpp as an outside CMake project would: `meson install` into a
# scratch prefix, then find_package(halfgrad) and halfgrad::halfgrad from that prefix; runs it.
# Usage: check-cmake.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
command -v cmake >/dev/null || { echo "no cmake: skipped (tools/setup-debian.sh installs it)"; exit 77; }
src="$1"
build="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
option() {
  meson introspect "$build" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]==sys.argv[1]))' "$1"
}
meson install -C "$build" --destdir "$work/root" --quiet >/dev/null
prefix="$work/root$(option prefix)"
libdir="$prefix/$(option libdir)"
[ -f "$libdir/cmake/halfgrad/halfgradConfig.cmake" ] || { echo "no halfgradConfig.cmake under $libdir/cmake"; exit 1; }
[ -f "$libdir/cmake/halfgrad/halfgradConfigVersion.cmake" ] || { echo "no version file"; exit 1; }
mkdir -p "$work/app"
cp "$src/tests/external/contract.cpp" "$work/app/"
cat >"$work/app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(contract CXX)
find_package(halfgrad 0.1 REQUIRED)
add_executable(contract contract.cpp)
target_link_libraries(contract PRIVATE halfgrad::halfgrad)
CMAKE
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
LD_LIBRARY_PATH="$libdir" "$work/app/build/contract"
# A version the package does not satisfy is refused.
sed -i 's/find_package(halfgrad 0.1 REQUIRED)/find_package(halfgrad 99.0 REQUIRED)/' "$work/app/CMakeLists.txt"
if cmake -S "$work/app" -B "$work/app/build99" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
  echo "find_package(halfgrad 99.0) was accepted"
  exit 1
fi
echo "cmake: find_package(halfgrad) from an install built and ran the contract"
