// ResNet-18 in the form used for 3x32x32 images (He et al. 2016, section 4.2's CIFAR stem: one
// 3x3 convolution, no max pool, then four stages of two basic blocks at 64, 128, 256 and 512
// channels), the other workload mixed precision is judged on. Built from public modules only;
// tools/amp_bench_torch.py defines the same network so both start from the same weights.
#pragma once

#include <memory>

#include <halfgrad.h>

namespace amp_bench {

// The network and, in *forward_flops, 2 x the multiply-adds of its convolutions and the final
// linear for one 3x32x32 image.
std::shared_ptr<hg::nn::Sequential> resnet18(int64_t classes, double* forward_flops);

}  // namespace amp_bench
