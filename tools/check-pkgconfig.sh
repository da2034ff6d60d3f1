#!/usr/bin/env bash
# Builds tests/external/contract.cpp as an outside program would, with pkg-config, against
# (1) the uninstalled build tree and (2) a `meson install` into a scratch prefix, and runs it.
set -euo pipefail
src="$1"
build="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cxx="${CXX:-g++}"

PKG_CONFIG_PATH="$build/meson-uninstalled" \
  $cxx -std=c++20 "$src/tests/external/contract.cpp" -o "$work/uninstalled" \
  $(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --cflags --libs halfgrad)
LD_LIBRARY_PATH="$build" "$work/uninstalled"

meson install -C "$build" --destdir "$work/root" --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
libdir=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"))')
pcdir="$work/root$prefix/$libdir/pkgconfig"
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$work/root$prefix" --cflags --libs halfgrad)
$cxx -std=c++20 "$src/tests/external/contract.cpp" -o "$work/installed" $flags
LD_LIBRARY_PATH="$work/root$prefix/$libdir" "$work/installed"
echo "pkg-config: uninstalled and installed builds ran the contract"
