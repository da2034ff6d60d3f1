// amp policy table: it matches the op registry both ways; each policy and eligibility rule in action.
#include <set>

#include "amp/autocast_hook.h"
#include "framework/op.h"
#include "helpers.h"

using namespace hg;
using amp::CastPolicy;
using hg::test::check_error;

TEST_CASE("amp: the policy table and the op registry match both ways") {
  const std::vector<std::string> problems = amp::policy_table_problems();
  CHECK_MESSAGE(problems.empty(), fmt::format("{}", fmt::join(problems, "; ")));
  for (const OpDef* op : op_registry()) {
    CAPTURE(op->name);
    // The row a call uses is the one bound to the OpDef, the same as the table's.
    CHECK(&amp::policy_row(*op) == amp::find_policy_row(op->name));
    CHECK(&amp::policy_row(*op) == op->autocast_row.load());
  }
  // An op without a row is an error under autocast, not a silent pass-through.
  check_error([] { amp::policy_for("not_an_op", kCPU); }, {"[not_an_op]", "no autocast policy row"});
  std::set<std::string_view> names;
  for (const amp::PolicyRow& row : amp::policy_table()) CHECK_MESSAGE(names.insert(row.op).second, row.op);
}

TEST_CASE("amp: the table's rows follow docs/AMP.md section 2") {
  struct Expect {
    const char* op;
    CastPolicy cpu, cuda;
  };
  const CastPolicy L = CastPolicy::LowerPrecision, F = CastPolicy::Fp32, O = CastPolicy::Fp32OutputDtype,
                   P = CastPolicy::Promote, R = CastPolicy::Refused, N = CastPolicy::PassThrough;
  const Expect expected[] = {
      {"mm", L, L},
      {"bmm", L, L},
      {"linear", L, L},
      {"conv2d", L, L},
      {"conv2d_relu", L, L},
      {"lstm_recurrence", L, L},
      {"lstm_projected_recurrence", L, L},
      {"gru_recurrence", L, L},
      {"rnn_recurrence", L, L},
      {"exp", N, F},
      {"log", N, F},
      {"pow", N, F},
      {"softplus", N, F},
      {"layer_norm", N, F},
      {"batch_norm", N, N},
      {"softmax", N, O},
      {"log_softmax", N, O},
      {"sum", N, O},
      {"cross_entropy", F, O},
      {"nll_loss", F, F},
      {"mse_loss", F, F},
      {"binary_cross_entropy_with_logits", F, F},
      {"binary_cross_entropy", F, R},
      {"cat", P, P},
      {"stack", P, P},
      {"relu", N, N},
      {"add", N, N},
      {"add_", N, N},
      {"copy_", N, N},
      {"dropout", N, N},
      {"max_pool2d", N, N},
      {"where", N, N},
      {"embedding", N, N},
      {"to", N, N},
      {"cumsum", N, O},
      {"norm", N, O},
      {"var", N, N},
      {"sort", N, N},
      {"topk", N, N},
      {"tril", N, N},
      {"multinomial", N, N},
      {"conv_transpose2d", L, L},
      {"reflection_pad", F, N},
      {"replication_pad", F, N},
      {"constant_pad", N, N},
      {"circular_pad", N, N},
      {"adaptive_avg_pool2d", N, N},
      {"adaptive_max_pool2d", N, N},
      {"upsample_nearest2d", N, N},
      {"upsample_bilinear2d", N, N},
  };
  for (const Expect& e : expected) {
    CAPTURE(e.op);
    CHECK(amp::policy_for(e.op, kCPU) == e.cpu);
    CHECK(amp::policy_for(e.op, kCUDA) == e.cuda);
  }
  CHECK(amp::policy_name(CastPolicy::Fp32OutputDtype) == "fp32 with output dtype");
}

TEST_CASE("amp: lower precision on real ops, with float64 and integer inputs untouched") {
  Tensor x = randn({3, 4}), w = randn({5, 4}), bias = randn({5});
  amp::AutocastGuard g(kCPU, kBFloat16);
  OpRecorder rec;
  Tensor y = linear(x, w, bias);
  CHECK(y.dtype() == kBFloat16);
  CHECK(bmm(randn({2, 3, 4}), randn({2, 4, 2})).dtype() == kBFloat16);
  for (const OpEvent& e : rec.events())
    if (e.name == "linear") CHECK(e.inputs == std::vector<Dtype>{kBFloat16, kBFloat16, kBFloat16});
  // float64 is not eligible: mm runs in float64 and nothing is cast.
  rec.clear();
  Tensor d = randn({3, 3}, kFloat64);
  CHECK(mm(d, d).dtype() == kFloat64);
  CHECK(rec.count("to") == 0);
  // Integer tensors are not eligible either.
  AutocastResult r =
      amp::apply_policy("mm", CastPolicy::LowerPrecision, kCPU, kBFloat16, {arange(int64_t{4}), randn({2})});
  CHECK(r.inputs[0].dtype() == kInt64);
  CHECK(r.inputs[1].dtype() == kBFloat16);
  // Eligibility is per device type: a cpu tensor is not eligible for a cuda region.
  CHECK_FALSE(amp::is_eligible(randn({2}), kCUDA));
  CHECK(amp::is_eligible(randn({2}, kFloat16), kCPU));
  CHECK_FALSE(amp::is_eligible(Tensor(), kCPU));
}

TEST_CASE("amp: float16 regions work the same way") {
  Tensor a = randn({4, 4});
  amp::AutocastGuard g(kCPU, kFloat16);
  CHECK(mm(a, a).dtype() == kFloat16);
}

TEST_CASE("amp: the fp32 policy casts eligible inputs to float32") {
  // On the cpu the fp32 rows are the losses (see the loss test once they exist); the policy
  // itself, on lower-precision and float64 inputs:
  AutocastResult r = amp::apply_policy("mse_loss", CastPolicy::Fp32, kCPU, kBFloat16,
                                       {randn({3}, kBFloat16), randn({3}, kFloat16), randn({3}, kFloat64)});
  CHECK(r.inputs[0].dtype() == kFloat32);
  CHECK(r.inputs[1].dtype() == kFloat32);
  CHECK(r.inputs[2].dtype() == kFloat64);
  CHECK_FALSE(r.output_dtype.has_value());
}

namespace {
// Runs `sum` under the fp32-with-output-dtype policy (its cuda row) on the cpu, every other op
// through the real hook: the policy end to end on a real op.
AutocastResult sum_with_cuda_row(const OpDef& op, TensorList inputs) {
  if (std::string_view(op.name) == "sum")
    return amp::apply_policy(op.name, CastPolicy::Fp32OutputDtype, kCPU, amp::get_autocast_dtype(kCPU),
                             std::move(inputs));
  return amp::autocast_hook(op, std::move(inputs));
}
struct HookOverride {
  explicit HookOverride(AutocastHook h) { set_autocast_hook(h); }
  ~HookOverride() { set_autocast_hook(&amp::autocast_hook); }
};
}  // namespace

TEST_CASE("amp: fp32 with output dtype makes a float32 result without copying the input") {
  Tensor x = randn({64, 32}, kBFloat16);
  HookOverride hook(&sum_with_cuda_row);
  amp::AutocastGuard g(kCPU, kBFloat16);
  OpRecorder rec;
  Tensor s = sum(x);
  CHECK(s.dtype() == kFloat32);
  CHECK(rec.count("to") == 0);
  REQUIRE(rec.count("sum") == 1);
  CHECK(rec.events().back().inputs == std::vector<Dtype>{kBFloat16});
  CHECK(s.item<double>() == doctest::Approx(x.to(kFloat64).sum().item<double>()).epsilon(1e-4));
  // An explicit output dtype wins; a float64 first input is not eligible.
  CHECK(sum(x, kFloat64).dtype() == kFloat64);
  CHECK(sum(randn({3}, kFloat64)).dtype() == kFloat64);
  // The same row on the real cpu table is pass-through.
  HookOverride real(&amp::autocast_hook);
  CHECK(sum(x).dtype() == kBFloat16);
}

TEST_CASE("amp: promote casts to the widest dtype and refuses float16 with bfloat16") {
  Tensor f32 = randn({2}), bf = randn({2}, kBFloat16), h = randn({2}, kFloat16), d = randn({2}, kFloat64);
  auto promoted = [](TensorList in) {
    return amp::apply_policy("cat", CastPolicy::Promote, kCPU, kBFloat16, std::move(in)).inputs;
  };
  TensorList r = promoted({bf, f32, d});
  CHECK(r[0].dtype() == kFloat32);
  CHECK(r[1].dtype() == kFloat32);
  CHECK(r[2].dtype() == kFloat64);  // not eligible: the op's own promotion handles it
  r = promoted({bf, bf});
  CHECK(r[1].dtype() == kBFloat16);
  CHECK(promoted({h, h})[0].dtype() == kFloat16);
  check_error([&] { promoted({h, bf}); }, {"[cat]", "float16 and bfloat16"});
  check_error([&] { promoted({h, f32, bf}); }, {"[cat]", "float16 and bfloat16"});
}

TEST_CASE("amp: refused ops say what to use instead") {
  CHECK(amp::policy_for("binary_cross_entropy", kCUDA) == CastPolicy::Refused);
  check_error([] { amp::apply_policy("binary_cross_entropy", CastPolicy::Refused, kCUDA, kFloat16, {randn({2})}); },
              {"[binary_cross_entropy]", "refused", "cuda autocast", "binary_cross_entropy_with_logits"});
}

TEST_CASE("amp: pass-through ops run in their inputs' dtypes, in-place ops run as asked") {
  Tensor a = randn({4}), b = randn({4}, kBFloat16);
  amp::AutocastGuard g(kCPU, kBFloat16);
  OpRecorder rec;
  CHECK(relu(a).dtype() == kFloat32);
  CHECK(relu(b).dtype() == kBFloat16);
  CHECK(exp(a).dtype() == kFloat32);     // fp32 on cuda only
  CHECK(add(a, b).dtype() == kFloat32);  // normal promotion
  CHECK(mul(b, b).dtype() == kBFloat16);
  Tensor c = randn({4});
  c.add_(b);
  CHECK(c.dtype() == kFloat32);
  CHECK(sum(a).dtype() == kFloat32);
  CHECK(rec.count("relu") == 2);
}
