#include "framework/ops/optim_update_kernels.h"

namespace hg::optim {

HG_DEFINE_STUB(sgd_update_stub, SgdUpdateFn);
HG_DEFINE_STUB(adam_update_stub, AdamUpdateFn);
HG_DEFINE_STUB(sgd_multi_update_stub, SgdMultiUpdateFn);
HG_DEFINE_STUB(adam_multi_update_stub, AdamMultiUpdateFn);

void check_multi_update(const char* op, const TensorList& params, const TensorList& grads,
                        std::initializer_list<const TensorList*> states,
                        std::initializer_list<std::pair<const TensorList*, Dtype>> flags, const TensorList& cast_outs,
                        const Tensor& skip, const Tensor& hyper, int64_t hyper_size) {
  const size_t n = params.size();
  HG_CHECK(grads.size() == n && cast_outs.size() == n, op, "{} params need as many grads and cast_outs, got {} and {}",
           n, grads.size(), cast_outs.size());
  HG_CHECK(hyper.defined() && hyper.dtype() == kFloat64 && hyper.numel() == hyper_size && hyper.is_contiguous(), op,
           "hyper must be a contiguous float64 tensor of {} values", hyper_size);
  if (n == 0) return;
  HG_CHECK(params[0].defined(), op, "param 0 is undefined");
  const Device device = params[0].device();
  const Dtype dtype = params[0].dtype();
  HG_CHECK(hyper.device() == device, op, "hyper is on {}, the params on {}", hyper.device(), device);
  HG_CHECK(!skip.defined() || (skip.device() == device && skip.dtype() == kFloat32 && skip.numel() == 1), op,
           "skip must be one float32 on {}", device);
  auto same = [&](const Tensor& t, size_t i, const char* what) {
    HG_CHECK(t.defined() && t.device() == device && t.dtype() == dtype && t.is_contiguous() &&
                 t.numel() == params[i].numel(),
             op, "{} {} must be a contiguous {} tensor of {} values on {}", what, i, dtype, params[i].numel(), device);
  };
  for (size_t i = 0; i < n; ++i) {
    same(params[i], i, "param");
    same(grads[i], i, "grad");
    const Tensor& c = cast_outs[i];
    HG_CHECK(!c.defined() || (dtype == kFloat32 && (c.dtype() == kFloat16 || c.dtype() == kBFloat16) &&
                              c.device() == device && c.is_contiguous() && c.numel() == params[i].numel()),
             op, "cast_out {} must be a contiguous float16/bfloat16 tensor of a float32 param's size", i);
  }
  for (const TensorList* s : states) {
    if (s->empty()) continue;
    HG_CHECK(s->size() == n, op, "{} params need as many state tensors, got {}", n, s->size());
    for (size_t i = 0; i < n; ++i) same((*s)[i], i, "state");
  }
  for (const auto& [list, flag_dtype] : flags) {
    if (list->empty()) continue;
    HG_CHECK(list->size() == n, op, "{} params need as many flags, got {}", n, list->size());
    for (const Tensor& f : *list)
      HG_CHECK(f.defined() && f.device() == device && f.dtype() == flag_dtype && f.numel() == 1, op,
               "each flag must be one {} on {}", flag_dtype, device);
  }
}

}  // namespace hg::optim
