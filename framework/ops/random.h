// The global generator's state, as PyTorch's torch.get_rng_state / torch.set_rng_state: a copy of
// everything rand, randn, randint, randperm, multinomial, dropout and attention dropout will draw,
// so a run saved and resumed mid-way draws the same numbers as one never interrupted. One
// generator serves every device (CUDA kernels take their seeds from it), so this state covers
// CUDA's draws too: there is no separate CUDA generator to save.
#pragma once

#include "framework/tensor.h"

namespace hg {

// A 1-d uint8 CPU tensor (the bytes of the state; save it with the checkpoint).
Tensor get_rng_state();
// Restores a state from get_rng_state. Anything else (another dtype, truncated or edited bytes)
// is refused with "[set_rng_state] ..." and leaves the generator as it was.
void set_rng_state(const Tensor& state);

}  // namespace hg
