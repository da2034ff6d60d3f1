// --rounds: the whole plan run several times, halfgrad's cells and then PyTorch's in each round,
// and the rounds folded into one result per cell. On a shared machine the same cell can move by
// tens of percent between minutes, so a ratio from one pass compares halfgrad in one minute with
// PyTorch in another; a ratio taken within each round, and its median over rounds, does not.
#pragma once

#include <vector>

#include "results.h"

namespace amp_bench {

// The rounds' figures for every cell, in each round's order (every round runs the same plan).
// Each side's summary becomes the median over the rounds where it ran of that round's median,
// p10, p90 and mean (min and max over all of them, counts added); the derived ratios become the
// median over rounds of each round's own ratio, so a ratio never pairs two rounds. Losses,
// memory and allocations come from the first round (every round trains the same model from the
// same seed). A side that failed in any round carries that round's status and note. With one
// round the cells come back as they are, with their one RoundFigures each.
std::vector<CellResult> combine_rounds(const std::vector<std::vector<CellResult>>& rounds);

// The median of the finite values (NaN when none).
double median_of_finite(std::vector<double> values);

}  // namespace amp_bench
