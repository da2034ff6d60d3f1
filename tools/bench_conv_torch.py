"""PyTorch counterpart of bench_conv: forward + backward of the MNIST CNN's two conv layers
(batch 128) in float32 and bfloat16, median ms. Usage: python3 tools/bench_conv_torch.py [iters]"""
import sys
import time

import torch
import torch.nn.functional as F


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.set_num_threads(2)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(128, 1, 28, 28).to(dtype)
        w1 = (torch.randn(32, 1, 3, 3) * 0.3).to(dtype).requires_grad_()
        b1 = torch.zeros(32, dtype=dtype, requires_grad=True)
        w2 = (torch.randn(64, 32, 3, 3) * 0.06).to(dtype).requires_grad_()
        b2 = torch.zeros(64, dtype=dtype, requires_grad=True)
        g = torch.randn(128, 64, 24, 24).to(dtype)
        times = []
        for i in range(iters + 2):
            t0 = time.perf_counter()
            y = F.conv2d(F.relu(F.conv2d(x, w1, b1)), w2, b2)
            y.backward(g)
            t1 = time.perf_counter()
            if i >= 2:
                times.append((t1 - t0) * 1e3)
            for p in (w1, b1, w2, b2):
                p.grad = None
        times.sort()
        print(f"torch {torch.__version__} conv1+conv2 {str(dtype):15s} batch 128: "
              f"forward+backward {times[len(times) // 2]:.2f} ms")


if __name__ == "__main__":
    main()
