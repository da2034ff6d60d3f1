// nn::BatchNorm1d on [N, C] and [N, C, L]: outputs and running statistics against PyTorch in
// training and eval, gradcheck through it, bad input.
#include <algorithm>
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// (arange(n) * 0.37).sin() * 2 + 0.3 in float64, the input the expected values below were made from.
Tensor input(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 0.37) * 2 + 0.3;
  return tensor(v, shape);
}

// BatchNorm1d(3, momentum=0.2) with weight [1.5, -0.5, 2], bias [0.1, 0.2, -0.3], float64.
std::shared_ptr<nn::BatchNorm1d> make() {
  auto bn = std::make_shared<nn::BatchNorm1d>(3, nn::BatchNormOptions{.momentum = 0.2});
  bn->to(kFloat64);
  NoGradGuard no_grad;
  bn->weight.copy_(tensor(std::vector<double>{1.5, -0.5, 2.0}));
  bn->bias.copy_(tensor(std::vector<double>{0.1, 0.2, -0.3}));
  return bn;
}
}  // namespace

TEST_CASE("BatchNorm1d matches PyTorch on [N, C] and [N, C, L] in training and eval") {
  struct Case {
    Shape shape;
    std::vector<double> y1, running_mean, running_var, y3;
  };
  // torch.nn.BatchNorm1d(3, momentum=0.2).double() with the weights above: y1 = bn(x) (training), then
  // bn(x * 0.5), then bn.eval() and y3 = bn(x); running stats printed after the two training steps.
  const std::vector<Case> cases = {
      {{4, 3},
       {-1.0860666095682099, 0.17856260582314784, 0.9553189562440381, 1.7375342903194442, -0.3954092842144861,
        1.812236037661769, 1.4250267080663757, 0.03157425290017329, -0.5187978957005988, -1.6764943828571455,
        0.9852724374120942, -3.4487571458889246},
       {0.2736460342685201, 0.2537215820465801, 0.21001403804184188},
       {0.8935788313326267, 0.9819127423442724, 1.1424852577788513},
       {0.1418184936897193, -0.18828016389556199, 2.3917288540337265, 2.984409159698188, -0.8283573820274114,
        3.4657070233705674, 2.6697998477360083, -0.3521974178059428, 0.5442113376121781, -0.45258012594879643,
        0.711339824130697, -3.12792023729202}},
      {{2, 3, 5},
       {-0.7574410173444586,  0.29111035977042066,   1.1977452269696762,   1.8397548081943198,     2.1302461184286914,
        -0.22844995996745912, -0.005997062505741786, 0.36206325085917507,  0.8259157433623339,     1.322780156173843,
        0.3612192640991093,   -1.120566809560563,    -2.009451137559372,   -2.18512739604757,      -1.6238186275733604,
        -2.6979897659254726,  -1.7875453121924678,   -0.7376810745894854,  0.30950874745969353,    1.2122919241302437,
        -0.14394836912706274, -0.2759907673860243,   -0.22588336838396714, -0.0004079735113854197, 0.36991838028861074,
        4.211488302465018,    2.1987531841062626,    0.32966542189957043,  -1.1428027238274343,    -2.01935959721095},
       {0.23176760148559994, 0.41290082815927864, -0.26035840527389853},
       {0.8897639298497957, 0.7679178773682694, 0.764713429203001},
       {0.20850307953448416, 1.3585839294187663,  2.353006731544374,   3.0571810246918574,  3.3758001217146467,
        -0.8325337878403267, -0.64457655595153,   -0.3335911812607002, 0.05833192466610149, 0.4781478080360871,
        -1.441961435752958,  -2.680773971307579,  -3.423904891321799,  -3.5707749119564354, -3.1015058649170024,
        -1.919945752558765,  -0.9213444880191388, 0.23017634443432547, 1.3787638021574784,  2.3689619610148345,
        -0.7611358187161263, -0.8727024647427691, -0.8303651963995016, -0.6398541643434811, -0.3269541430358372,
        1.7769657999480128,  0.09426575322958915, -1.4683412863646996, -2.6993637865467557, -3.4321886269045585}},
  };
  // PyTorch 1.13's float64 CPU batch_norm differs from an exact float64 computation by up to ~1e-8 here
  // (numpy's (x - mean) / sqrt(var + eps) gives y1[0] = -1.0860666110583255, as halfgrad does), hence 1e-7.
  const test::Tolerance tol{1e-7, 1e-7};
  for (const Case& c : cases) {
    CAPTURE(c.shape);
    auto bn = make();
    const Tensor x = input(c.shape);
    check_close((*bn)(x), tensor(c.y1, c.shape), tol);
    (*bn)(x * 0.5);
    check_close(bn->running_mean, tensor(c.running_mean, {3}), tol);
    check_close(bn->running_var, tensor(c.running_var, {3}), tol);
    CHECK(bn->num_batches_tracked.item<int64_t>() == 2);
    bn->eval();
    check_close((*bn)(x), tensor(c.y3, c.shape), tol);
    CHECK(bn->num_batches_tracked.item<int64_t>() == 2);
  }
}

TEST_CASE("BatchNorm1d: state dict keys as PyTorch's, gradients through it, no running stats") {
  nn::BatchNorm1d bn(4);
  std::vector<std::string> keys;
  for (const auto& [k, v] : bn.state_dict()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"});
  manual_seed(61);
  CHECK(autograd::gradcheck(
      [](const TensorList& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
      {randn({5, 4, 3}, kFloat64), randn({4}, kFloat64), randn({4}, kFloat64)}));
  // Without running stats, eval normalises with the batch's own statistics, as PyTorch.
  nn::BatchNorm1d stateless(4, {.affine = false, .track_running_stats = false});
  stateless.eval();
  const Tensor x = randn({6, 4});
  check_close(stateless(x), batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true));
}

TEST_CASE("BatchNorm1d: bad input names the module") {
  nn::BatchNorm1d bn(3);
  check_error([&] { bn(randn({4, 5})); }, {"[BatchNorm1d]", "[N, 3] or [N, 3, L]", "[4, 5]"});
  check_error([&] { bn(randn({2, 3, 4, 5})); }, {"[BatchNorm1d]", "[2, 3, 4, 5]"});
  check_error([&] { bn(randn({3})); }, {"[BatchNorm1d]"});
  // One value per channel cannot give a batch variance, as PyTorch refuses.
  check_error([&] { bn(randn({1, 3})); }, {"[BatchNorm1d]", "more than 1 value per channel"});
  check_error([] { nn::BatchNorm1d(0); }, {"[BatchNorm1d]", "num_features"});
}
