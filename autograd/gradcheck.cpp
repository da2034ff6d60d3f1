#include "autograd/gradcheck.h"

#include <cmath>
#include <set>
#include <string>

#include "autograd/engine.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/reduce.h"

namespace hg::autograd {

namespace {
std::set<std::string>& gradchecked_ops_storage() {
  static std::set<std::string> names;
  return names;
}

void record_covered_nodes(const std::shared_ptr<Node>& root, std::set<std::string>& names) {
  std::vector<const Node*> stack;
  std::set<const Node*> seen;
  if (root) stack.push_back(root.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    names.insert(n->name());
    for (const Edge& e : n->next_edges())
      if (e.node) stack.push_back(e.node.get());
  }
}
}  // namespace

std::set<std::string> gradchecked_ops() { return gradchecked_ops_storage(); }

namespace {
std::set<std::string>& gradgradchecked_ops_storage() {
  static std::set<std::string> names;
  return names;
}

// Deterministic values in [-1, 1] (different per `salt`), so a failure reproduces.
Tensor pattern(const Shape& shape, double salt) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(salt + 2.3 * static_cast<double>(i) + 0.1 * salt * i);
  return tensor(v, shape);
}
}  // namespace

std::set<std::string> gradgradchecked_ops() { return gradgradchecked_ops_storage(); }

bool gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                   GradcheckOptions options) {
  TensorList x;
  TensorList vars;  // the differentiable inputs, then v
  for (const Tensor& t : inputs) {
    if (t.defined() && is_floating(t.dtype())) {
      Tensor c = t.detach().to(kFloat64).clone();
      c.requires_grad_(true);
      x.push_back(c);
      vars.push_back(c);
    } else {
      x.push_back(t);
    }
  }
  HG_CHECK(!vars.empty(), "gradgradcheck", "no floating-point input to check");
  const size_t n_inputs = vars.size();

  const Tensor out = fn(x);
  HG_CHECK(out.defined() && out.dtype() == kFloat64, "gradgradcheck", "fn must return a float64 tensor, got {}",
           out.defined() ? dtype_name(out.dtype()) : "an undefined tensor");
  HG_CHECK(out.requires_grad(), "gradgradcheck", "fn's output does not depend on a differentiable input");
  Tensor v = pattern(out.shape(), 0.7);
  v.requires_grad_(true);
  vars.push_back(v);

  // The first derivatives, recorded; u projects them to one scalar.
  const TensorList inputs_only(vars.begin(), vars.begin() + static_cast<std::ptrdiff_t>(n_inputs));
  TensorList us;
  for (size_t k = 0; k < n_inputs; ++k) us.push_back(pattern(inputs_only[k].shape(), 1.9 + static_cast<double>(k)));
  auto first_scalar = [&](const Tensor& o, bool create_graph) -> Tensor {
    TensorList g = grad({o}, inputs_only, {v}, create_graph, create_graph, /*allow_unused=*/true);
    Tensor total;
    for (size_t k = 0; k < g.size(); ++k) {
      if (!g[k].defined()) continue;
      Tensor term = sum(g[k] * us[k]);
      total = total.defined() ? total + term : term;
    }
    return total;
  };

  const Tensor s = first_scalar(out, /*create_graph=*/true);
  TensorList analytic(vars.size());
  if (s.defined() && s.requires_grad()) {
    record_covered_nodes(out.grad_fn(), gradgradchecked_ops_storage());
    analytic = grad({s}, vars, {}, false, false, /*allow_unused=*/true);
  }

  for (size_t k = 0; k < vars.size(); ++k) {
    Tensor& xi = vars[k];
    auto* data = static_cast<double*>(xi.raw_data());
    const std::vector<double> a =
        analytic[k].defined() ? analytic[k].to_vector<double>() : std::vector<double>(static_cast<size_t>(xi.numel()));
    HG_CHECK(xi.is_contiguous(), "gradgradcheck", "internal: variable copy is not contiguous");
    auto eval = [&] {
      const Tensor f = first_scalar(fn(x), /*create_graph=*/false);
      return f.defined() ? f.item<double>() : 0.0;
    };
    for (int64_t i = 0; i < xi.numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + options.eps;
      const double plus = eval();
      data[i] = saved - options.eps;
      const double minus = eval();
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double analytic_i = a[static_cast<size_t>(i)];
      const bool ok = std::abs(analytic_i - numeric) <= options.atol + options.rtol * std::abs(numeric);
      HG_CHECK(ok && std::isfinite(analytic_i), "gradgradcheck",
               "second derivative mismatch for {} element {}: analytic {:.8g}, numerical {:.8g}",
               k < n_inputs ? fmt::format("input {}", k) : std::string("the output gradient"), i, analytic_i, numeric);
    }
  }
  return true;
}

bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs, GradcheckOptions options) {
  TensorList x;
  TensorList differentiable;
  for (const Tensor& t : inputs) {
    if (t.defined() && is_floating(t.dtype())) {
      Tensor c = t.detach().to(kFloat64).clone();
      c.requires_grad_(true);
      x.push_back(c);
      differentiable.push_back(c);
    } else {
      x.push_back(t);
    }
  }
  HG_CHECK(!differentiable.empty(), "gradcheck", "no floating-point input to check");

  const Tensor out = fn(x);
  // Coverage counts the ops whose backward this check really exercises: the nodes reachable from
  // the output, not every op that ran (casts and views used as plumbing have no node here).
  record_covered_nodes(out.grad_fn(), gradchecked_ops_storage());
  HG_CHECK(out.defined() && out.dtype() == kFloat64, "gradcheck", "fn must return a float64 tensor, got {}",
           out.defined() ? dtype_name(out.dtype()) : "an undefined tensor");
  // A fixed projection makes a scalar whose gradient tests the whole Jacobian-vector product.
  std::vector<double> pv(static_cast<size_t>(out.numel()));
  for (size_t i = 0; i < pv.size(); ++i) pv[i] = 0.5 + 0.37 * std::sin(1.0 + 1.7 * static_cast<double>(i));
  const Tensor v = tensor(pv, out.shape());
  auto scalarize = [&](const Tensor& o) { return sum(o * v); };

  TensorList analytic =
      grad({scalarize(out)}, differentiable, {}, false, /*create_graph=*/false, /*allow_unused=*/true);

  NoGradGuard no_grad;
  for (size_t k = 0; k < differentiable.size(); ++k) {
    Tensor& xi = differentiable[k];
    auto* data = static_cast<double*>(xi.raw_data());
    const std::vector<double> a =
        analytic[k].defined() ? analytic[k].to_vector<double>() : std::vector<double>(static_cast<size_t>(xi.numel()));
    HG_CHECK(xi.is_contiguous(), "gradcheck", "internal: input copy is not contiguous");
    for (int64_t i = 0; i < xi.numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + options.eps;
      const double plus = scalarize(fn(x)).item<double>();
      data[i] = saved - options.eps;
      const double minus = scalarize(fn(x)).item<double>();
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double analytic_i = a[static_cast<size_t>(i)];
      const bool ok = std::abs(analytic_i - numeric) <= options.atol + options.rtol * std::abs(numeric);
      HG_CHECK(ok && std::isfinite(analytic_i), "gradcheck",
               "gradient mismatch for input {} element {}: analytic {:.8g}, numerical {:.8g}", k, i, analytic_i,
               numeric);
    }
  }
  return true;
}

}  // namespace hg::autograd
