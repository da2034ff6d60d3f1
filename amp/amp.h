// hg::amp, automatic mixed precision: autocast scopes, the policy table, the cast cache and
// GradScaler. The op recorder (hg::OpRecorder) is in framework/op.h.
#pragma once

#include "amp/autocast_hook.h"
#include "amp/autocast_scope.h"
#include "amp/cast_cache.h"
#include "amp/device_support.h"
#include "amp/grad_scaler.h"
#include "amp/policy.h"
