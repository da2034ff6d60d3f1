#!/usr/bin/env bash
# Lists the headers `meson install` puts under include/halfgrad (paths relative to the root): the
# user API only. Kernel plumbing (framework/dispatch.h, framework/ops/*_kernels.h) and kernels/
# stay in the tree; tools/check-installed-headers.sh checks that none of it is installed.
cd "$(dirname "$0")/.."
echo halfgrad.h
find framework autograd distributed nn optim data serialize amp -name '*.h' ! -name '*_kernels.h' ! -path framework/dispatch.h ! -path framework/ops/internal.h ! -path distributed/backend.h | sort
