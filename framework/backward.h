// What an op hands autograd: its backward formula (BackwardFn) and the tensors it keeps for it
// (SavedTensor). A custom autograd::Function's context holds SavedTensors, so this is user API;
// how an op records them (OpCall, framework/op.h) is not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "framework/tensor.h"

namespace hg {

// Maps the gradients of an op's outputs to the gradients of its inputs (one per input, an
// undefined Tensor where an input gets none). A missing output gradient is an undefined Tensor.
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// A tensor kept for backward: its data (a detached alias), the storage version at save time and
// its autograd identity. get() throws, naming the op, when the tensor was modified in place since.
// With grad mode off (a plain backward) get() is the detached alias; with grad mode on (the
// engine under create_graph) it is an alias that keeps the saved tensor's history, so the
// recorded formula differentiates through it. An op's own output is saved with output(): it
// keeps no link to its node (node -> saved output -> node would be a cycle, as in PyTorch) and
// is linked to the node running the formula when unpacked.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // For output `output_nr` of the op that saves it (saved before call.finish()).
  static SavedTensor output(const Tensor& t, const char* op, uint32_t output_nr = 0);
  Tensor get() const;

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
  const char* op_ = "";
  bool requires_grad_ = false;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
  std::shared_ptr<autograd::Node> grad_fn_;  // a non-leaf input's producer
  std::shared_ptr<AutogradMeta> leaf_;       // a leaf input's slot (shared with every handle of it)
};

}  // namespace hg
