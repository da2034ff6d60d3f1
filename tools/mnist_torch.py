#!/usr/bin/env python3
"""PyTorch twin of examples/mnist_mlp and examples/mnist_cnn, for comparing accuracies.

Same data (the IDX files under --data, normalised with mean 0.1307 / std 0.3081), same models,
same optimiser (SGD, momentum 0.9), same batch size and learning rate, PyTorch's own
initialisation and shuffling. The last line printed is a JSON object shaped like the
examples' last line, so tools/accuracy-sweep.sh can read both.

  /usr/bin/python3 tools/mnist_torch.py --model mlp --epochs 1 --seed 0 --data datasets/mnist
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import mnist_models  # the models, defined once for every PyTorch twin (tools/)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = data[4 + 4 * ndim :]
    count = 1
    for d in dims:
        count *= d
    if len(body) != count:
        raise ValueError(f"{path}: {len(body)} data bytes, header says {count}")
    return dims, body


def load_split(torch, directory, prefix):
    def find(name):
        for candidate in (name, name + ".gz"):
            path = os.path.join(directory, candidate)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f"{os.path.join(directory, name)} (run tools/fetch-mnist.sh)")

    dims, pixels = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    _, labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(dims[0], 1, dims[1], dims[2])
    x = (x.float() / 255.0 - 0.1307) / 0.3081
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


def make_model(torch, name):
    return mnist_models.build(torch, "mnist_" + name)  # "mlp" or "cnn"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--data", default="datasets/mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--amp", choices=["off", "bf16"], default="off")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("mnist_torch.py: PyTorch is not importable (Debian: apt install python3-torch)", file=sys.stderr)
        return 77

    torch.manual_seed(args.seed)
    train_x, train_y = load_split(torch, args.data, "train")
    test_x, test_y = load_split(torch, args.data, "t10k")
    model = make_model(torch, args.model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    generator = torch.Generator().manual_seed(args.seed)
    autocast = args.amp == "bf16"
    step_ms, losses, samples, seconds = [], [], 0, 0.0
    for _ in range(args.epochs):
        order = torch.randperm(train_x.shape[0], generator=generator)
        for start in range(0, train_x.shape[0], args.batch_size):
            index = order[start : start + args.batch_size]
            x, y = train_x[index], train_y[index]
            t0 = time.perf_counter()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            value = loss.item()
            elapsed = time.perf_counter() - t0
            step_ms.append(elapsed * 1000)
            seconds += elapsed
            samples += x.shape[0]
            losses = (losses + [value])[-50:]
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for start in range(0, test_x.shape[0], 1000):
            pred = model(test_x[start : start + 1000]).argmax(1)
            correct += int((pred == test_y[start : start + 1000]).sum())
    step_ms.sort()
    print(json.dumps({"model": args.model, "framework": "torch " + torch.__version__, "device": "cpu",
                      "amp": args.amp, "epochs": args.epochs, "seed": args.seed,
                      "test_accuracy": round(correct / test_x.shape[0], 4),
                      "final_loss": round(sum(losses) / len(losses), 4),
                      "step_ms_median": round(step_ms[len(step_ms) // 2], 2),
                      "samples_per_s": round(samples / seconds)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
