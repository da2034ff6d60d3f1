#!/usr/bin/env python3
"""PyTorch's side of tools/op_bench: torch.matmul per dtype and size, and
F.scaled_dot_product_attention forward and forward+backward, timed the same way (median of --iters
calls after --warmup, each finished on the device). Prints the same JSON document.
Before PyTorch 2.0 (no F.scaled_dot_product_attention) attention is the composite
softmax(q k^T / sqrt(D) + causal mask) v, and the result says so."""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def median_ms(device, call, warmup, iters):
    ms = []
    for i in range(warmup + iters):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            ms.append((time.perf_counter() - t0) * 1000.0)
    return sorted(ms)[len(ms) // 2]


def composite_sdpa(q, k, v, is_causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if is_causal:
        T = q.size(-2)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--mm-sizes", default="1024")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--sdpa", default="2,4,256,64", help="B,H,T,D")
    p.add_argument("--sdpa-dtypes", default="bf16")
    p.add_argument("--causal", default="true", choices=["true", "false"])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-mm", action="store_true")
    p.add_argument("--no-sdpa", action="store_true")
    a = p.parse_args()
    dev = a.device
    causal = a.causal == "true"
    results = []
    if not a.no_mm:
        for name in a.dtypes.split(","):
            if name == "tf32" and dev != "cuda":
                continue
            if dev == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            for n in (int(x) for x in a.mm_sizes.split(",")):
                x = torch.randn(n, n, device=dev, dtype=DTYPES[name])
                y = torch.randn(n, n, device=dev, dtype=DTYPES[name])
                ms = median_ms(dev, lambda: torch.matmul(x, y), a.warmup, a.iters)
                results.append({"op": "mm", "dtype": name, "n": n, "ms": ms, "tflops": 2.0 * n ** 3 / (ms * 1e9)})
        if dev == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
    if not a.no_sdpa:
        B, H, T, D = (int(x) for x in a.sdpa.split(","))
        fused = hasattr(F, "scaled_dot_product_attention")
        sdpa = (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)) if fused else \
            (lambda q, k, v: composite_sdpa(q, k, v, causal))
        forward_flops = 4.0 * B * H * T * T * D / (2.0 if causal else 1.0)
        for name in a.sdpa_dtypes.split(","):
            q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=DTYPES[name], requires_grad=True) for _ in range(3))
            grad = torch.randn(B, H, T, D, device=dev, dtype=DTYPES[name])
            with torch.no_grad():
                fwd = median_ms(dev, lambda: sdpa(q, k, v), a.warmup, a.iters)
            both = median_ms(dev, lambda: sdpa(q, k, v).backward(grad), a.warmup, a.iters)
            results.append({"op": "sdpa", "dtype": name, "shape": [B, H, T, D], "causal": causal,
                            "forward_ms": fwd, "forward_backward_ms": both,
                            "forward_tflops": forward_flops / (fwd * 1e9),
                            "forward_backward_tflops": 3.5 * forward_flops / (both * 1e9),
                            "note": "" if fused else "composite (no F.scaled_dot_product_attention before 2.0)"})
    json.dump({"tool": "op_bench", "framework": "pytorch " + torch.__version__, "device": dev, "results": results},
              sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
