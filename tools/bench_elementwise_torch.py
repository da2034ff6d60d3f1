#!/usr/bin/env python3
"""Elementwise ops, halfgrad next to PyTorch (docs/history/PERF.md, "Elementwise ops").

For each op, dtype and thread count it times halfgrad (tools/bench_elementwise, one process per
thread count, fed over stdin) and PyTorch in this process in alternating rounds (--rounds, each
the median of --reps out-of-place calls on --n elements; who goes first alternates too). A
shared or virtual machine moves between faster and slower phases (on a 2-vCPU VM a second
thread gave 2x in one second and nothing the next), so a cell timed in one block each way can
compare two phases; the ratio printed is the median of the rounds' own ratios, each taken from
two timings a few milliseconds apart. Prints a Markdown table.

  python3 tools/bench_elementwise_torch.py --hg build/tools/bench_elementwise
"""
import argparse
import os
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

UNARY = {
    "neg": (torch.neg, False), "abs": (torch.abs, False), "relu": (torch.relu, False),
    "reciprocal": (torch.reciprocal, True), "sqrt": (torch.sqrt, True), "rsqrt": (torch.rsqrt, True),
    "exp": (torch.exp, False), "log": (torch.log, True), "log1p": (torch.log1p, True),
    "sigmoid": (torch.sigmoid, False), "tanh": (torch.tanh, False), "erf": (torch.erf, False),
    "gelu": (F.gelu, False), "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), False),
    "softplus": (F.softplus, False), "pow_2.5": (lambda x: torch.pow(x, 2.5), True),
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}
TRANSCENDENTAL = {"exp", "log", "log1p", "sigmoid", "tanh", "erf", "gelu", "gelu_tanh", "softplus", "pow_2.5"}


def median_ms(reps, f):
    f()
    t = []
    for _ in range(reps):
        s = time.perf_counter()
        f()
        t.append((time.perf_counter() - s) * 1e3)
    return statistics.median(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hg", default="build/tools/bench_elementwise")
    p.add_argument("--n", type=int, default=4 * 1024 * 1024)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--ops", default="", help="comma-separated subset (default: all)")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    names = list(UNARY) + list(BINARY)
    if a.ops:
        names = [o for o in names if o in a.ops.split(",")]
    procs = {}
    for t in threads:
        env = dict(os.environ, HG_NUM_THREADS=str(t))
        procs[t] = subprocess.Popen([a.hg], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def hg_ms(t, op, dtype):
        procs[t].stdin.write(f"{op} {dtype} {a.n} {a.reps}\n")
        procs[t].stdin.flush()
        line = procs[t].stdout.readline().strip()
        if line.startswith("error") or not line:
            raise SystemExit(f"bench_elementwise: {line}")
        return float(line)

    torch.manual_seed(0)
    rows = {}
    for dtype in a.dtypes.split(","):
        td = getattr(torch, dtype)
        for op in names:
            x, y = torch.randn(a.n) * 2, torch.randn(a.n) * 2
            if op in UNARY:
                f, positive = UNARY[op]
                if positive:
                    x = x.abs() + 0.1
                x = x.to(td)
                call = lambda: f(x)
            else:
                x, y = x.to(td), y.to(td)
                call = lambda: BINARY[op](x, y)
            for t in threads:
                torch.set_num_threads(t)
                hs, ts = [], []
                for r in range(a.rounds):
                    if r % 2 == 0:
                        hs.append(hg_ms(t, op, dtype))
                        ts.append(median_ms(a.reps, call))
                    else:
                        ts.append(median_ms(a.reps, call))
                        hs.append(hg_ms(t, op, dtype))
                ratio = statistics.median(h / tm for h, tm in zip(hs, ts))
                rows[(op, dtype, t)] = (statistics.median(hs), statistics.median(ts), ratio)
    for pr in procs.values():
        pr.stdin.close()
        pr.wait()

    print(f"n = {a.n}, {a.rounds} alternating rounds of {a.reps} calls; ms (median of the rounds' medians), "
          f"halfgrad / PyTorch {torch.__version__} (ratio = median of the rounds' hg/torch; vs mul = hg/hg mul, "
          f"same dtype and threads)\n")
    head = "| op | dtype |" + "".join(f" {t}T hg | {t}T torch | {t}T ratio | {t}T vs mul |" for t in threads)
    print(head)
    print("|" + "---|" * (2 + 4 * len(threads)))
    worst = []
    for dtype in a.dtypes.split(","):
        for op in names:
            cells = []
            for t in threads:
                h, tm, ratio = rows[(op, dtype, t)]
                mul = rows.get(("mul", dtype, t), (float("nan"),))[0]
                cells.append(f" {h:.3f} | {tm:.3f} | {ratio:.2f} | {h / mul:.2f} |")
                worst.append((ratio, op, dtype, t))
            print(f"| {op}{'*' if op in TRANSCENDENTAL else ''} | {dtype} |" + "".join(cells))
    worst.sort(reverse=True)
    print("\n(* transcendental) slowest relative to PyTorch:",
          ", ".join(f"{o} {d} {t}T {r:.2f}x" for r, o, d, t in worst[:5]))


if __name__ == "__main__":
    main()
