// hg::amp, automatic mixed precision: autocast scopes, the cast cache, GradScaler, and fp8
// regions with their delayed-scaling recipe. The op recorder (hg::OpRecorder) is in
// framework/op_recorder.h. The policy table and the hook that applies it (amp/policy.h,
// amp/autocast_hook.h) are internals, not installed: docs/AMP.md lists the policies.
#pragma once

#include "amp/autocast_scope.h"
#include "amp/cast_cache.h"
#include "amp/device_support.h"
#include "amp/fp8_autocast.h"
#include "amp/fp8_ops.h"
#include "amp/fp8_recipe.h"
#include "amp/grad_scaler.h"
