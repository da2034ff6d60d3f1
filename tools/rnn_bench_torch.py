# PyTorch's side of tools/rnn_bench.cpp: nn.LSTM/GRU/RNN forward and forward+backward on the CPU,
# fp32 or under bfloat16 autocast, the same sizes and the same JSON line.
#   /usr/bin/python3 tools/rnn_bench_torch.py --module lstm --threads 1 --amp bf16
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--module", default="lstm", choices=["lstm", "gru", "rnn"])
p.add_argument("--amp", default="off", choices=["off", "bf16"])
for name, default in (("seq", 64), ("batch", 32), ("input", 128), ("hidden", 256), ("layers", 2), ("warmup", 3),
                      ("iters", 10), ("threads", 0)):
    p.add_argument("--" + name, type=int, default=default)
a = p.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
torch.manual_seed(0)
m = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[a.module](a.input, a.hidden, a.layers)
x = torch.randn(a.seq, a.batch, a.input)


def forward():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
        return m(x)[0].float().sum()


def median_ms(fn):
    for _ in range(a.warmup):
        fn()
    ms = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return sorted(ms)[len(ms) // 2]


def fwd():
    with torch.no_grad():
        forward()


def fwd_bwd():
    m.zero_grad(set_to_none=True)
    forward().backward()


f, fb = median_ms(fwd), median_ms(fwd_bwd)
print(json.dumps({"impl": f"torch {torch.__version__}", "module": a.module, "amp": a.amp,
                  "threads": str(a.threads or torch.get_num_threads()), "forward_ms": round(f, 2),
                  "forward_backward_ms": round(fb, 2)}))
