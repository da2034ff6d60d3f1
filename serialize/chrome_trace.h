// An OpRecorder's events as a Chrome trace (the JSON "Trace Event Format" that Perfetto and
// chrome://tracing open), so a training step is seen as a timeline: one complete ("X") event per
// op, nested ops inside their caller, the backward pass on a row of its own. Times are the
// host's: on CUDA an op's span is its launch, since kernels run asynchronously (HG_CUDA_SYNC_DEBUG=1
// makes each op wait for its kernels, so the spans become the GPU's).
#pragma once

#include <string>

#include "framework/op_recorder.h"

namespace hg {

std::string chrome_trace_json(const OpRecorder& recorder);
// Written atomically (a temporary file renamed over `path`); "[chrome_trace] ..." on failure.
void write_chrome_trace(const OpRecorder& recorder, const std::string& path);

}  // namespace hg
