#!/usr/bin/env python3
"""PyTorch's side of amp_bench: the same models (the four classifiers and GPT-2), weights, batches, optimizer, precisions and
step counts as build/tools/amp_bench, timed the same way. Prints one JSON document on stdout
(progress goes to stderr). amp_bench runs it itself; run it alone with --help for the flags.

The weights and synthetic batches come from the SplitMix64 counters of
tools/amp_bench/portable_random.h, so both frameworks start from the same numbers bit for bit.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import gpt2_torch  # GPT-2, as examples/gpt2_model.h
import mnist_models  # the models, defined once for every PyTorch twin

MODELS = ["linear", "mnist_mlp", "mnist_cnn", "wide_mlp", "resnet", "gpt2"]
DEFAULT_MODELS = ["linear", "mnist_mlp", "mnist_cnn", "wide_mlp"]  # resnet and gpt2 when asked for
PRECISIONS = ["fp32", "bf16", "fp16", "tf32"]
DEVICES = ["cpu", "cuda"]
BATCHES_PER_CELL = 4  # kBatchesPerCell in tools/amp_bench/data.h
MASK = (1 << 64) - 1


# ---- portable random numbers (tools/amp_bench/portable_random.h) ----

def splitmix64_int(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def stream_uniform(seed, stream, n):
    """Elements 0..n-1 of StreamUniform(seed, stream): float64 in [0, 1) with 24 random bits."""
    key = splitmix64_int((seed + splitmix64_int(stream)) & MASK)
    x = np.arange(n, dtype=np.uint64) + np.uint64(key)  # wraps modulo 2^64 as in C++
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(40)).astype(np.float64) * 2.0**-24


# ---- models (tools/mnist_models.py; C++: tools/amp_bench/models.cpp) ----

def model_info(name):
    """(sample shape, classes, MNIST-shaped)."""
    if name == "wide_mlp":
        return (4096,), 4096, False
    if name in ("resnet", "resnet18"):
        return (3, 32, 32), 10, False
    if name == "resnet50":
        return (3, 224, 224), 1000, False
    return (1, 28, 28), 10, True


def resnet_arch(args, name, device):
    """The network a cell builds: the resnet cell's is --resnet-cpu / --resnet-cuda's."""
    if name != "resnet":
        return name
    return args.resnet_cuda if device == "cuda" else args.resnet_cpu


class BasicBlock(torch.nn.Module):
    """tools/amp_bench/resnet.cpp's block, parameters registered in the same order."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class Bottleneck(torch.nn.Module):
    """tools/amp_bench/resnet.cpp's bottleneck block, parameters registered in the same order."""

    def __init__(self, cin, mid, stride):
        super().__init__()
        nn = torch.nn
        cout = 4 * mid
        self.conv1 = nn.Conv2d(cin, mid, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn3(self.conv3(torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))))
        return torch.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


def resnet50(classes):
    nn = torch.nn
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for mid, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            layers.append(Bottleneck(cin, mid, 2 if block == 0 and mid != 64 else 1))
            cin = 4 * mid
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, classes)]
    return nn.Sequential(*layers)


def resnet18(classes):
    nn = torch.nn
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for width in (64, 128, 256, 512):
        for block in range(2):
            layers.append(BasicBlock(cin, width, 2 if block == 0 and width != 64 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def build_model(name, seed):
    if name in ("resnet", "resnet18"):
        model = resnet18(10)
    elif name == "resnet50":
        model = resnet50(1000)
    elif name in mnist_models.LAYERS:
        model = mnist_models.build(torch, name)
    else:
        raise ValueError(f"unknown model {name}")
    bound = 1.0
    with torch.no_grad():
        for k, p in enumerate(model.parameters()):
            if p.dim() >= 2:
                bound = 1.0 / math.sqrt(p.numel() // p.shape[0])
            u = stream_uniform(seed, 1000 + k, p.numel())
            p.copy_(torch.from_numpy(((2.0 * u - 1.0) * bound).astype(np.float32)).view(p.shape))
    return model


# ---- data (tools/amp_bench/data.cpp) ----

def synthetic_batches(name, batch, seed):
    shape, classes, _ = model_info(name)
    per_sample = int(np.prod(shape))
    out = []
    for j in range(BATCHES_PER_CELL):
        x = (2.0 * stream_uniform(seed, 2 * j, batch * per_sample) - 1.0).astype(np.float32)
        y = np.floor(stream_uniform(seed, 2 * j + 1, batch) * classes).astype(np.int64)
        out.append((torch.from_numpy(x).view(batch, *shape), torch.from_numpy(y)))
    return out


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mnist_batches(directory, batch):
    images_path = os.path.join(directory, "train-images-idx3-ubyte")
    labels_path = os.path.join(directory, "train-labels-idx1-ubyte")
    for p in (images_path, labels_path):
        if not os.path.exists(p):
            sys.exit(f"amp_bench_torch: --real-data: {p} is missing; fetch MNIST with "
                     f"`bash tools/fetch-mnist.sh {directory}` or point --data at it")
    n = BATCHES_PER_CELL * batch
    images = read_idx(images_path)[:n].astype(np.float32)
    labels = read_idx(labels_path)[:n].astype(np.int64)
    x = ((images / 255.0 - 0.1307) / 0.3081).astype(np.float32).reshape(n, 1, 28, 28)
    return [(torch.from_numpy(x[j * batch:(j + 1) * batch].copy()), torch.from_numpy(labels[j * batch:(j + 1) * batch].copy()))
            for j in range(BATCHES_PER_CELL)]


# ---- gpt2 (tools/amp_bench/gpt2_cell.cpp) ----

def gpt2_spec(text, flag):
    """ "d4:256:4" -> config namespace (layers, heads, embd, context, vocab) and batch."""
    try:
        size, context, batch = text.split(":")
        layers, heads, embd, _ = gpt2_torch.SIZES[size]
        context, batch = int(context), int(batch)
        assert context >= 1 and batch >= 1
    except (ValueError, KeyError, AssertionError):
        raise SystemExit(f"amp_bench_torch: {flag} '{text}': expected SIZE:CONTEXT:BATCH, e.g. d4:256:4")
    return argparse.Namespace(layers=layers, heads=heads, embd=embd, context=context, vocab=50257), batch


def gpt2_batches(c, batch, seed):
    out = []
    for j in range(BATCHES_PER_CELL):
        u = stream_uniform(seed, 3000 + j, batch * (c.context + 1))
        tokens = np.minimum(np.floor(u * c.vocab), c.vocab - 1).astype(np.int64).reshape(batch, c.context + 1)
        t = torch.from_numpy(tokens)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


def build_gpt2(c, seed):
    """llm.c's scheme with portable numbers, as init_portable in gpt2_cell.cpp."""
    model = gpt2_torch.GPT2(c)
    a_std = math.sqrt(3.0)
    with torch.no_grad():
        for k, (name, p) in enumerate(sorted(model.named_parameters())):
            if p.dim() < 2:
                p.fill_(0.0 if name.endswith("bias") else 1.0)
                continue
            sd = 0.02 / math.sqrt(2.0 * c.layers) if name.endswith("c_proj.weight") else 0.02
            u = stream_uniform(seed, 1000 + k, p.numel())
            p.copy_(torch.from_numpy(((2.0 * u - 1.0) * (sd * a_std)).astype(np.float32)).view(p.shape))
        model.transformer.wte.weight[c.vocab:].zero_()
    return model


# ---- memory (tools/amp_bench/memory.cpp) ----

def status_bytes(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_host_peak():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return status_bytes("VmRSS")


# ---- one cell ----

def make_scaler(device):
    """A GradScaler for fp16 on `device`, or None where this PyTorch has none for it."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device)
    if device == "cuda":
        return torch.cuda.amp.GradScaler()
    return None


def autocast_supported(device, dtype):
    """Whether torch.autocast really runs in `dtype` on `device` (1.13 turns CPU fp16 off with a
    warning, or refuses it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device_type=device, dtype=dtype):
                if device == "cpu":
                    return torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == dtype
                return torch.is_autocast_enabled()
    except RuntimeError:
        return False


def run_cell(args, name, precision, device, host_batches):
    on_cuda = device == "cuda"
    batch = host_batches[0][0].shape[0]
    result = {"model": name, "precision": precision, "device": device, "batch": batch, "status": "ok", "note": ""}
    if on_cuda and not torch.cuda.is_available():
        return dict(result, status="unsupported", note="no CUDA device visible to PyTorch")
    if precision == "tf32" and not on_cuda:
        return dict(result, status="unsupported", note="tf32 is a CUDA mode")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is not None and not autocast_supported(device, dtype):
        return dict(result, status="unsupported",
                    note=f"PyTorch {torch.__version__} has no {precision} autocast on {device}")
    scaler = None
    if precision == "fp16":
        scaler = make_scaler(device)
        if scaler is None:
            return dict(result, status="unsupported",
                        note=f"PyTorch {torch.__version__} has no GradScaler for {device}")

    if on_cuda:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rss_start = 0
    else:
        rss_start = reset_host_peak()

    batches = [(x.to(device), y.to(device)) for x, y in host_batches]
    if name == "gpt2":
        c, _ = gpt2_spec(args.gpt2_cuda if on_cuda else args.gpt2_cpu, "--gpt2-" + device)
        model = build_gpt2(c, args.seed).to(device)
        decay = [q for q in model.parameters() if q.dim() >= 2]
        plain = [q for q in model.parameters() if q.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}],
                                lr=args.gpt2_lr, betas=(0.9, 0.95), eps=1e-8)
        net = model
        if args.compile and on_cuda and hasattr(torch, "compile"):
            net = torch.compile(model)
            result["note"] = "torch.compile"

        def forward_loss(x, y):
            logits = net(x)
            return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        clip = 1.0
    else:
        model = build_model(resnet_arch(args, name, device), args.seed).to(device)
        if name == "resnet" and (not args.no_channels_last if on_cuda else args.cpu_channels_last):
            model = model.to(memory_format=torch.channels_last)
            batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in batches]
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

        def forward_loss(x, y):
            return F.cross_entropy(model(x), y)
        clip = 0.0
    step_ms = []
    cut = False
    timed_start = None
    total = args.warmup + args.steps
    for step in range(total):
        if step == args.warmup:
            timed_start = time.perf_counter()
        elif step > args.warmup and len(step_ms) >= 3 and time.perf_counter() - timed_start > args.max_seconds:
            cut = True
            break
        x, y = batches[step % BATCHES_PER_CELL]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype) if dtype is not None else contextlib.nullcontext():
            loss = forward_loss(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        if on_cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000.0
        if step >= args.warmup:
            step_ms.append(ms)

    if on_cuda:
        peak = torch.cuda.max_memory_allocated()
        cell = 0
    else:
        peak = status_bytes("VmHWM")
        cell = peak - rss_start
    with torch.no_grad():
        final_loss = forward_loss(*batches[0]).item()
    a = np.array(step_ms)
    median = float(np.percentile(a, 50))
    result.update({
        "steps": len(step_ms),
        "step_ms": {"median": median, "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
                    "mean": float(a.mean()), "min": float(a.min()), "max": float(a.max())},
        "samples_per_s": batch / (median / 1000.0),
        "final_loss": final_loss if math.isfinite(final_loss) else None,
        "peak_bytes": peak,
        "cell_bytes": cell,
    })
    if cut:
        result["note"] = (f"timed steps cut to {len(step_ms)} of {args.steps} by --max-seconds {args.max_seconds:g} "
                          f"(final loss after fewer steps)")
    return result


def parse_list(allowed):
    def parse(text):
        items = [s for s in text.split(",") if s]
        if items == ["all"]:
            return list(allowed)
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown or empty items {bad} (from {','.join(allowed)})")
        return items
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=parse_list(MODELS), default=DEFAULT_MODELS)
    p.add_argument("--precisions", type=parse_list(PRECISIONS), default=PRECISIONS)
    p.add_argument("--devices", type=parse_list(DEVICES), default=None, help="default: cpu, and cuda when present")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--wide-batch-cpu", type=int, default=64)
    p.add_argument("--wide-batch-cuda", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: leave as is)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="stop timing a cell after this many seconds (at least 3 steps)")
    p.add_argument("--resnet-batch-cpu", type=int, default=32)
    p.add_argument("--resnet-batch-cuda", type=int, default=256)
    p.add_argument("--resnet-cpu", choices=["resnet18", "resnet50"], default="resnet18")
    p.add_argument("--resnet-cuda", choices=["resnet18", "resnet50"], default="resnet50")
    p.add_argument("--no-channels-last", action="store_true", help="the resnet cell on cuda in NCHW")
    p.add_argument("--cpu-channels-last", action="store_true", help="the resnet cell on cpu in channels-last")
    p.add_argument("--gpt2-cpu", default="d4:256:4", help="gpt2 on cpu as SIZE:CONTEXT:BATCH")
    p.add_argument("--gpt2-cuda", default="d12:1024:16", help="gpt2 on cuda as SIZE:CONTEXT:BATCH")
    p.add_argument("--gpt2-lr", type=float, default=3e-4)
    p.add_argument("--compile", action="store_true", help="torch.compile gpt2 on cuda (torch >= 2.0)")
    p.add_argument("--real-data", action="store_true")
    p.add_argument("--data", default="datasets/mnist")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if args.devices is None:
        args.devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    mnist = mnist_batches(args.data, args.batch) if args.real_data else None
    cells = [(m, pr, d) for d in args.devices for m in args.models for pr in args.precisions
             if not (pr == "tf32" and d != "cuda")]
    results = []
    for i, (m, pr, d) in enumerate(cells):
        if m == "gpt2":
            c, batch = gpt2_spec(args.gpt2_cuda if d == "cuda" else args.gpt2_cpu, "--gpt2-" + d)
            data = gpt2_batches(c, batch, args.seed)
        else:
            batch = args.batch
            if m == "wide_mlp":
                batch = args.wide_batch_cuda if d == "cuda" else args.wide_batch_cpu
            elif m == "resnet":
                batch = args.resnet_batch_cuda if d == "cuda" else args.resnet_batch_cpu
            arch = resnet_arch(args, m, d)
            data = mnist if mnist is not None and model_info(arch)[2] else synthetic_batches(arch, batch, args.seed)
        try:
            r = run_cell(args, m, pr, d, data)
        except Exception as e:  # a failing cell is reported, the others still run
            r = {"model": m, "precision": pr, "device": d, "batch": batch, "status": "error",
                 "note": f"{type(e).__name__}: {e}"}
        results.append(r)
        shown = f"median {r['step_ms']['median']:.3g} ms" if r["status"] == "ok" else f"{r['status']}: {r['note']}"
        print(f"[torch {i + 1}/{len(cells)}] {m} {pr} {d} {shown}", file=sys.stderr, flush=True)

    json.dump({"tool": "amp_bench_torch", "schema": 1, "torch_version": torch.__version__,
               "threads": torch.get_num_threads(), "data": "mnist" if args.real_data else "synthetic",
               "results": results}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
