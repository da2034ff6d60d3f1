"""PyTorch twin of bench_train: median CPU training step (forward, cross_entropy, backward, SGD
momentum) for the MNIST MLP and CNN, batch 128, 2 threads.
Usage: /usr/bin/python3 tools/bench_train_torch.py [steps [mlp|cnn [fp32|bf16]]]"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def run(name, bf16, steps):
    torch.manual_seed(0)
    model = make_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 1, 28, 28)
    y = torch.randint(0, 10, (128,))
    times = []
    warmup = 3
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e3)
    times.sort()
    print(f"torch {torch.__version__} {name} {'bf16' if bf16 else 'fp32'} batch 128: step median "
          f"{times[len(times) // 2]:.2f} ms (p10 {times[len(times) // 10]:.2f}, p90 {times[len(times) * 9 // 10]:.2f})")


def main():
    steps = max(10, int(sys.argv[1])) if len(sys.argv) > 1 else 50
    torch.set_num_threads(2)
    for m in ("mlp", "cnn"):
        if len(sys.argv) > 2 and m != sys.argv[2]:
            continue
        for p in ("fp32", "bf16"):
            if len(sys.argv) > 3 and p != sys.argv[3]:
                continue
            run(m, p == "bf16", max(10, steps // 5) if m == "cnn" else steps)


if __name__ == "__main__":
    main()
