#include "nn/packed_sequence.h"

#include <algorithm>
#include <numeric>

#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"

namespace hg::nn {
namespace {

Tensor index_tensor(const std::vector<int64_t>& v) { return tensor(v, TensorOptions(kInt64)); }

// The shape after the first two (time, batch) dimensions.
Shape feature_shape(const Tensor& t, int64_t skip) { return Shape(t.shape().begin() + skip, t.shape().end()); }

std::vector<int64_t> lengths_of(const char* op, const Tensor& lengths) {
  HG_CHECK(lengths.defined(), op, "lengths is undefined");
  HG_CHECK(lengths.dim() == 1, op, "lengths must be 1-d, got shape {}", lengths.shape());
  HG_CHECK(!is_floating(lengths.dtype()) && lengths.dtype() != kBool, op, "lengths must hold integers, got {}",
           lengths.dtype());
  HG_CHECK(lengths.device().type == kCPU, op,
           "lengths must be a CPU tensor or a std::vector (it is read on the host), got a tensor on {}",
           lengths.device());
  return lengths.to(kInt64).to_vector<int64_t>();
}

// The packed rows of a [sorted] batch: sizes[t] = how many sequences have a step t.
std::vector<int64_t> batch_sizes_of(const std::vector<int64_t>& sorted_lengths) {
  std::vector<int64_t> sizes(static_cast<size_t>(sorted_lengths.front()), 0);
  for (int64_t len : sorted_lengths)
    for (int64_t t = 0; t < len; ++t) ++sizes[static_cast<size_t>(t)];
  return sizes;
}

}  // namespace

PackedSequence PackedSequence::to(Device device) const {
  PackedSequence moved = *this;
  moved.data = data.to(device);
  return moved;
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  const char* op = "pack_padded_sequence";
  HG_CHECK(input.defined(), op, "the input is undefined");
  HG_CHECK(input.dim() >= 2, op, "expected input of at least 2 dimensions ({}), got shape {}",
           batch_first ? "[B, T, *]" : "[T, B, *]", input.shape());
  const int64_t steps = input.size(batch_first ? 1 : 0), batch = input.size(batch_first ? 0 : 1);
  HG_CHECK(static_cast<int64_t>(lengths.size()) == batch, op,
           "expected {} lengths (one per sequence of the batch), got {}", batch, lengths.size());
  HG_CHECK(batch > 0, op, "cannot pack an empty batch (input shape {})", input.shape());
  for (size_t b = 0; b < lengths.size(); ++b) {
    HG_CHECK(lengths[b] > 0, op, "every sequence needs a length above 0, but lengths[{}] = {}", b, lengths[b]);
    HG_CHECK(lengths[b] <= steps, op, "lengths[{}] = {} is longer than the input's {} time steps (input shape {})", b,
             lengths[b], steps, input.shape());
    HG_CHECK(!enforce_sorted || b == 0 || lengths[b] <= lengths[b - 1], op,
             "lengths must be sorted in decreasing order when enforce_sorted is true (lengths[{}] = {} > lengths[{}] = "
             "{}); pass enforce_sorted = false to pack an unsorted batch",
             b, lengths[b], b - 1, lengths[b - 1]);
  }
  PackedSequence packed;
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  if (!enforce_sorted) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
    });
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    packed.sorted_indices = index_tensor(order);
    packed.unsorted_indices = index_tensor(inverse);
  }
  std::vector<int64_t> sorted_lengths;
  for (int64_t b : order) sorted_lengths.push_back(lengths[static_cast<size_t>(b)]);
  const std::vector<int64_t> sizes = batch_sizes_of(sorted_lengths);
  // One gather from the input's (time, batch) rows.
  std::vector<int64_t> rows;
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const int64_t b = order[static_cast<size_t>(i)], ti = static_cast<int64_t>(t);
      rows.push_back(batch_first ? b * steps + ti : ti * batch + b);
    }
  Shape flat{steps * batch};
  for (int64_t d : feature_shape(input, 2)) flat.push_back(d);
  packed.data = index_select(input.reshape(flat), 0, index_tensor(rows).to(input.device()));
  packed.batch_sizes = index_tensor(sizes);
  return packed;
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  return pack_padded_sequence(input, lengths_of("pack_padded_sequence", lengths), batch_first, enforce_sorted);
}

std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                              int64_t total_length) {
  const char* op = "pad_packed_sequence";
  const Tensor& data = sequence.data;
  HG_CHECK(data.defined() && data.dim() >= 1, op, "the packed data must be a tensor of at least 1 dimension");
  const std::vector<int64_t> sizes = lengths_of(op, sequence.batch_sizes);
  HG_CHECK(!sizes.empty(), op, "batch_sizes is empty");
  int64_t rows = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    HG_CHECK(sizes[t] > 0 && (t == 0 || sizes[t] <= sizes[t - 1]), op,
             "batch_sizes must be positive and non-increasing, got {} at step {}", sizes[t], t);
    rows += sizes[t];
  }
  HG_CHECK(rows == data.size(0), op, "the packed data has {} rows but batch_sizes add up to {}", data.size(0), rows);
  const int64_t batch = sizes[0], longest = static_cast<int64_t>(sizes.size());
  const int64_t steps = total_length < 0 ? longest : total_length;
  HG_CHECK(steps >= longest, op,
           "expected total_length to be at least the length of the longest sequence ({}), got total_length = {}",
           longest, total_length);
  std::vector<int64_t> unsorted(static_cast<size_t>(batch));
  std::iota(unsorted.begin(), unsorted.end(), 0);
  if (sequence.unsorted_indices.defined()) {
    unsorted = lengths_of(op, sequence.unsorted_indices);
    HG_CHECK(static_cast<int64_t>(unsorted.size()) == batch, op, "unsorted_indices has {} entries for a batch of {}",
             unsorted.size(), batch);
  }
  // sorted position p runs for the first len(p) steps; step t's rows start at offset[t].
  std::vector<int64_t> offset(sizes.size()), sorted_length(static_cast<size_t>(batch), 0);
  for (size_t t = 0, o = 0; t < sizes.size(); o += static_cast<size_t>(sizes[t]), ++t) {
    offset[t] = static_cast<int64_t>(o);
    for (int64_t p = 0; p < sizes[t]; ++p) ++sorted_length[static_cast<size_t>(p)];
  }
  // Every output row gathered from data's rows, or from one padding row appended after them.
  std::vector<int64_t> index, lengths;
  for (int64_t j = 0; j < batch; ++j) {
    const int64_t p = unsorted[static_cast<size_t>(j)];
    HG_CHECK(p >= 0 && p < batch, op, "unsorted_indices[{}] = {} is out of range for a batch of {}", j, p, batch);
    lengths.push_back(sorted_length[static_cast<size_t>(p)]);
  }
  auto source_row = [&](int64_t t, int64_t j) {
    const int64_t p = unsorted[static_cast<size_t>(j)];
    return t < longest && p < sizes[static_cast<size_t>(t)] ? offset[static_cast<size_t>(t)] + p : rows;
  };
  for (int64_t a = 0; a < (batch_first ? batch : steps); ++a)
    for (int64_t b = 0; b < (batch_first ? steps : batch); ++b)
      index.push_back(batch_first ? source_row(b, a) : source_row(a, b));
  const Shape features = feature_shape(data, 1);
  Shape pad_shape{1}, out_shape{batch_first ? batch : steps, batch_first ? steps : batch};
  for (int64_t d : features) {
    pad_shape.push_back(d);
    out_shape.push_back(d);
  }
  const Tensor source =
      cat({data, full(pad_shape, padding_value, TensorOptions(data.dtype()).device(data.device()))}, 0);
  Tensor padded = index_select(source, 0, index_tensor(index).to(data.device())).reshape(out_shape);
  return {padded, index_tensor(lengths)};
}

Tensor pad_sequence(const TensorList& sequences, bool batch_first, double padding_value) {
  const char* op = "pad_sequence";
  HG_CHECK(!sequences.empty(), op, "expected at least one sequence");
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    HG_CHECK(s.defined() && s.dim() >= 1, op, "sequence {} must be a tensor [L, *] of at least 1 dimension", i);
    HG_CHECK(feature_shape(s, 1) == feature_shape(sequences[0], 1), op,
             "every sequence must have the same trailing shape: sequence 0 has shape {}, sequence {} has {}",
             sequences[0].shape(), i, s.shape());
    HG_CHECK(s.dtype() == sequences[0].dtype() && s.device() == sequences[0].device(), op,
             "every sequence must have one dtype and device: sequence 0 is {} on {}, sequence {} is {} on {}",
             sequences[0].dtype(), sequences[0].device(), i, s.dtype(), s.device());
    longest = std::max(longest, s.size(0));
  }
  const int64_t batch = static_cast<int64_t>(sequences.size());
  std::vector<int64_t> start;
  int64_t rows = 0;
  for (const Tensor& s : sequences) {
    start.push_back(rows);
    rows += s.size(0);
  }
  std::vector<int64_t> index;
  for (int64_t a = 0; a < (batch_first ? batch : longest); ++a)
    for (int64_t b = 0; b < (batch_first ? longest : batch); ++b) {
      const int64_t i = batch_first ? a : b, t = batch_first ? b : a;
      index.push_back(t < sequences[static_cast<size_t>(i)].size(0) ? start[static_cast<size_t>(i)] + t : rows);
    }
  Shape pad_shape{1}, out_shape{batch_first ? batch : longest, batch_first ? longest : batch};
  for (int64_t d : feature_shape(sequences[0], 1)) {
    pad_shape.push_back(d);
    out_shape.push_back(d);
  }
  TensorList parts = sequences;
  parts.push_back(full(pad_shape, padding_value, TensorOptions(sequences[0].dtype()).device(sequences[0].device())));
  return index_select(cat(parts, 0), 0, index_tensor(index).to(sequences[0].device())).reshape(out_shape);
}

PackedSequence pack_sequence(const TensorList& sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() >= 1 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), lengths, false, enforce_sorted);
}

}  // namespace hg::nn
