// The gpt2 cell: GPT-2 (examples/gpt2_model.h) trained on synthetic tokens with llm.c's optimizer
// (AdamW 0.9/0.95, weight decay on matrices, clipping at 1.0), its weights and tokens portable so
// tools/amp_bench_torch.py starts from the same numbers. Reported as tokens/s and llm.c's FLOP
// count (6N + 6LCT a token) against a peak: the GPU's (--gpu-peak-tflops) or, on the CPU, the rate
// this machine's own GEMM reaches at the classifier's shape.
#pragma once

#include <string>
#include <vector>

#include "data.h"
#include "options.h"
#include "results.h"
#include "runner.h"

namespace amp_bench {

struct Gpt2Spec {
  std::string size;  // d12, d6, d4 or tiny (examples/gpt2_model.h)
  int64_t layers = 0, heads = 0, embd = 0, context = 0, batch = 0;
  int64_t vocab = 50257, padded_vocab = 50304;
  int64_t parameters() const;            // with the padded vocabulary and `context` positions, as llm.c counts
  double train_flops_per_token() const;  // llm.c: 6N + 6 L C T
  int64_t tokens_per_step() const { return batch * context; }
};

// "d4:256:4" (size:context:batch) -> the spec; an hg::Error naming `flag` for anything else.
Gpt2Spec parse_gpt2_spec(const std::string& text, const std::string& flag);
Gpt2Spec gpt2_spec(const Options& options, const std::string& device);

// kBatchesPerCell batches of [batch, context + 1] tokens: x is the first context columns, y the
// last (both int64), token t = floor(u * vocab) of StreamUniform(seed, 3000 + batch index).
std::vector<Batch> gpt2_batches(const Gpt2Spec& spec, uint64_t seed);

// Runs the cell (build, warm up, time, memory, final loss, GEMM rate on the CPU) into `cell`.
void measure_gpt2(const Options& options, CellResult& cell, const std::vector<Batch>& host_batches,
                  const StepCallback& on_step);

}  // namespace amp_bench
