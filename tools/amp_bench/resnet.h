// The resnet cell's networks, the other workload mixed precision is judged on: ResNet-18 in the
// form used for 3x32x32 images (He et al. 2016, section 4.2's CIFAR stem: one 3x3 convolution, no
// max pool, then four stages of two basic blocks at 64, 128, 256 and 512 channels), and ResNet-50
// for 3x224x224 (the ImageNet stem: 7x7 stride-2 convolution and a 3x3 stride-2 max pool, then
// bottleneck blocks 3-4-6-3, the stride on the 3x3 convolution as torchvision's). Built from public
// modules only; tools/amp_bench_torch.py defines the same networks so both start from the same
// weights.
#pragma once

#include <memory>

#include <halfgrad.h>

namespace amp_bench {

// The network and, in *forward_flops, 2 x the multiply-adds of its convolutions and the final
// linear for one 3x32x32 image.
std::shared_ptr<hg::nn::Sequential> resnet18(int64_t classes, double* forward_flops);
// Likewise for one 3x224x224 image.
std::shared_ptr<hg::nn::Sequential> resnet50(int64_t classes, double* forward_flops);

}  // namespace amp_bench
