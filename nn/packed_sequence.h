// Variable-length batches for the recurrent modules, as torch.nn.utils.rnn: PackedSequence and
// pack_padded_sequence, pad_packed_sequence, pad_sequence, pack_sequence. nn::LSTM, nn::GRU and
// nn::RNN take a PackedSequence and run each sequence for its own length only: its final state
// is the state after its last real step, and padding never enters the recurrence.
//
// A packed batch lists the sequences' rows time step by time step: step 0's row of every
// sequence, then step 1's of every sequence still running, and so on, the sequences sorted by
// decreasing length (batch_sizes[t] rows at step t). Packing and unpacking are index_select
// gathers, so gradients flow back to the padded input.
#pragma once

#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace hg::nn {

struct PackedSequence {
  Tensor data;         // [sum of lengths, *]
  Tensor batch_sizes;  // int64 on the CPU, one count per time step, non-increasing
  // When the batch was not given sorted by decreasing length (enforce_sorted = false): the
  // original index of each sorted sequence, and its inverse. Undefined otherwise.
  Tensor sorted_indices, unsorted_indices;

  // The same batch with data moved to `device` (the indices stay where they are used: on the CPU).
  PackedSequence to(Device device) const;
};

// input [T, B, *] ([B, T, *] with batch_first), lengths[b] in 1..T. enforce_sorted requires
// lengths in decreasing order; otherwise the batch is sorted here and unsorted by pad_packed_sequence
// (and by the recurrent modules' returned states).
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

// The inverse: {padded [T, B, *] ([B, T, *] with batch_first), lengths (int64 on the CPU)} in the
// batch's original order, padded with padding_value to total_length steps (default: the longest).
std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                              double padding_value = 0.0, int64_t total_length = -1);

// sequences[i] [L_i, *] (the same * for all) into [max L, B, *] ([B, max L, *] with batch_first).
Tensor pad_sequence(const TensorList& sequences, bool batch_first = false, double padding_value = 0.0);
// pad_sequence, then pack_padded_sequence with the sequences' lengths.
PackedSequence pack_sequence(const TensorList& sequences, bool enforce_sorted = true);

}  // namespace hg::nn
