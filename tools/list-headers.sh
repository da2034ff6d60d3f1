#!/usr/bin/env bash
# Lists the headers `meson install` puts under include/halfgrad (paths relative to the root): the
# user API only. Kernel plumbing (framework/dispatch.h, framework/ops/*_kernels.h), the op-call
# plumbing (framework/op.h: OpCall, the autocast and autograd hooks; framework/view_history.h),
# the autocast policy internals (amp/policy.h, amp/autocast_hook.h), the CUDA backend loader
# (framework/cuda_backend.h) and kernels/ stay in the tree; tools/check-installed-headers.sh
# checks that none of it is installed.
cd "$(dirname "$0")/.."
echo halfgrad.h
find framework autograd distributed nn optim data serialize amp -name '*.h' ! -name '*_kernels.h' ! -path framework/dispatch.h ! -path framework/ops/internal.h ! -path distributed/backend.h \
  ! -path framework/op.h ! -path framework/ops/conv_args.h ! -path framework/view_history.h ! -path framework/cuda_backend.h ! -path framework/capture_state.h ! -path amp/policy.h \
  ! -path amp/autocast_hook.h | sort
