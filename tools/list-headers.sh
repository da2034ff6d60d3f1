#!/usr/bin/env bash
# Lists the headers `meson install` puts under include/halfgrad (paths relative to the root).
cd "$(dirname "$0")/.."
echo halfgrad.h
find framework autograd amp kernels/common -name '*.h' | sort
