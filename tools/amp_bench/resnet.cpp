#include "resnet.h"

namespace amp_bench {

namespace nn = hg::nn;

namespace {

// Counts the FLOPs of the convolutions as the network is built, tracking the feature map's side.
struct FlopCounter {
  int64_t side = 32;  // the feature map's side before the next layer
  double flops = 0;
  std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
    const int64_t out_side = (side + 2 * (k / 2) - k) / stride + 1;
    flops += 2.0 * static_cast<double>(in * out * k * k * out_side * out_side);
    return std::make_shared<nn::Conv2d>(
        in, out, k, nn::Conv2dOptions{.stride = {stride, stride}, .padding = {k / 2, k / 2}, .bias = false});
  }
};

// The shortcut where a block changes the shape: a strided 1x1 convolution and batch norm, its
// FLOPs counted at the block's input side `side_in` (f.side is left at the block's output side).
std::shared_ptr<nn::Sequential> projection(FlopCounter& f, int64_t side_in, int64_t in, int64_t out, int64_t stride) {
  const int64_t after = f.side;
  f.side = side_in;
  auto conv = f.conv(in, out, 1, stride);
  f.side = after;
  auto shortcut = std::make_shared<nn::Sequential>();
  shortcut->push_back(conv).push_back(std::make_shared<nn::BatchNorm2d>(out));
  return shortcut;
}

// Two 3x3 convolutions with batch norm, and the input added back (through a strided 1x1
// convolution where the shape changes).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(FlopCounter& f, int64_t in, int64_t out, int64_t stride) : Module("BasicBlock") {
    const int64_t side = f.side;
    conv1 = register_module("conv1", f.conv(in, out, 3, stride));
    f.side = (side - 1) / stride + 1;
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", f.conv(out, out, 3, 1));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) shortcut = register_module("shortcut", projection(f, side, in, out, stride));
  }
  hg::Tensor forward(const hg::Tensor& x) override {
    // BatchNorm + ReLU and relu(bn2(..) + shortcut) each one op: fused into batch norm's pass on
    // CUDA (the three kernels in turn elsewhere, with the same values).
    const hg::Tensor h = bn1->forward_add_relu((*conv1)(x), hg::Tensor());
    return bn2->forward_add_relu((*conv2)(h), shortcut ? (*shortcut)(x) : x);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;
};

// 1x1 down to `mid` channels, 3x3 (carrying the stride), 1x1 up to 4 * mid, each with batch norm,
// and the input added back (through a strided 1x1 convolution where the shape changes).
class Bottleneck : public nn::Module {
 public:
  Bottleneck(FlopCounter& f, int64_t in, int64_t mid, int64_t stride) : Module("Bottleneck") {
    const int64_t out = 4 * mid, side = f.side;
    conv1 = register_module("conv1", f.conv(in, mid, 1, 1));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(mid));
    conv2 = register_module("conv2", f.conv(mid, mid, 3, stride));
    f.side = (side - 1) / stride + 1;
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(mid));
    conv3 = register_module("conv3", f.conv(mid, out, 1, 1));
    bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) shortcut = register_module("shortcut", projection(f, side, in, out, stride));
  }
  hg::Tensor forward(const hg::Tensor& x) override {
    // As BasicBlock: each BatchNorm + ReLU, and the tail with the shortcut, one op.
    const hg::Tensor h1 = bn1->forward_add_relu((*conv1)(x), hg::Tensor());
    const hg::Tensor h2 = bn2->forward_add_relu((*conv2)(h1), hg::Tensor());
    return bn3->forward_add_relu((*conv3)(h2), shortcut ? (*shortcut)(x) : x);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::Sequential> shortcut;
};

// The mean over the feature map: [N, C, H, W] -> [N, C] (PyTorch: AdaptiveAvgPool2d(1) + Flatten).
class GlobalAvgPool : public nn::Module {
 public:
  GlobalAvgPool() : Module("GlobalAvgPool") {}
  hg::Tensor forward(const hg::Tensor& x) override { return x.mean({2, 3}); }
};

}  // namespace

std::shared_ptr<nn::Sequential> resnet18(int64_t classes, double* forward_flops) {
  FlopCounter f;
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(f.conv(3, 64, 3, 1))
      .push_back(std::make_shared<nn::BatchNorm2d>(64))
      .push_back(std::make_shared<nn::ReLU>());
  int64_t in = 64;
  for (const int64_t width : {64, 128, 256, 512}) {
    for (int block = 0; block < 2; ++block) {
      const int64_t stride = block == 0 && width != 64 ? 2 : 1;
      net->push_back(std::make_shared<BasicBlock>(f, in, width, stride));
      in = width;
    }
  }
  net->push_back(std::make_shared<GlobalAvgPool>()).push_back(std::make_shared<nn::Linear>(512, classes));
  f.flops += 2.0 * 512.0 * static_cast<double>(classes);
  if (forward_flops != nullptr) *forward_flops = f.flops;
  return net;
}

std::shared_ptr<nn::Sequential> resnet50(int64_t classes, double* forward_flops) {
  FlopCounter f{224};
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(f.conv(3, 64, 7, 2))
      .push_back(std::make_shared<nn::BatchNorm2d>(64))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(3, nn::Pool2dOptions{.stride = {2, 2}, .padding = {1, 1}}));
  f.side = (f.side + 2 * 3 - 7) / 2 + 1;  // the stem's stride-2 convolution: 112
  f.side = (f.side + 2 - 3) / 2 + 1;      // the stride-2 max pool: 56
  int64_t in = 64;
  const std::pair<int64_t, int> stages[] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (const auto& [mid, blocks] : stages) {
    for (int block = 0; block < blocks; ++block) {
      const int64_t stride = block == 0 && mid != 64 ? 2 : 1;
      net->push_back(std::make_shared<Bottleneck>(f, in, mid, stride));
      in = 4 * mid;
    }
  }
  net->push_back(std::make_shared<GlobalAvgPool>()).push_back(std::make_shared<nn::Linear>(2048, classes));
  f.flops += 2.0 * 2048.0 * static_cast<double>(classes);
  if (forward_flops != nullptr) *forward_flops = f.flops;
  return net;
}

}  // namespace amp_bench
