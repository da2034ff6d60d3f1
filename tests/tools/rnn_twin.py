# PyTorch 1.13's nn.LSTM (also with proj_size), nn.GRU and nn.RNN (tanh, relu) at 2 layers,
# bidirectional, batch-first, time-major and on a packed batch of unsorted lengths
# (pack_padded_sequence, enforce_sorted=False): weights, input, initial state, outputs and every
# gradient of a weighted sum of the outputs, into one safetensors file for tests/tools/rnn_twin.cpp
# to compare halfgrad with.
# Usage: rnn_twin.py OUT.safetensors
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from gpt2_torch import save_safetensors  # noqa: E402

IN, HIDDEN, LAYERS, N, L, PROJ = 5, 7, 2, 3, 6, 3
LENGTHS = [4, 6, 1]  # the packed case's, unsorted
KINDS = ("lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu")


def module(kind, batch_first):
    opts = dict(num_layers=LAYERS, bidirectional=True, batch_first=batch_first)
    if kind == "lstm":
        return torch.nn.LSTM(IN, HIDDEN, **opts)
    if kind == "lstm_proj":
        return torch.nn.LSTM(IN, HIDDEN, proj_size=PROJ, **opts)
    if kind == "gru":
        return torch.nn.GRU(IN, HIDDEN, **opts)
    return torch.nn.RNN(IN, HIDDEN, nonlinearity=kind[4:], **opts)


def record(case, kind, layout):
    """layout: 'bf' (batch-first), 'tm' (time-major) or 'packed' (batch-first padded input, packed)."""
    batch_first = layout != "tm"
    m = module(kind, batch_first)
    x = torch.randn((N, L, IN) if batch_first else (L, N, IN), requires_grad=True)
    h0 = torch.randn(2 * LAYERS, N, PROJ if kind == "lstm_proj" else HIDDEN, requires_grad=True)
    c0 = torch.randn(2 * LAYERS, N, HIDDEN, requires_grad=True)
    inp = x
    if layout == "packed":
        inp = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    if kind.startswith("lstm"):
        y, (hn, cn) = m(inp, (h0, c0))
    else:
        y, hn = m(inp, h0)
        cn = None
    extra = {}
    if layout == "packed":
        extra = {"packed": y.data, "batch_sizes": y.batch_sizes}
        y, extra["lengths"] = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True)
    wy, wh, wc = torch.randn_like(y), torch.randn_like(hn), torch.randn_like(c0)
    loss = (y * wy).sum() + (hn * wh).sum() + ((cn * wc).sum() if cn is not None else 0)
    loss.backward()
    t = {"x": x, "h0": h0, "y": y, "hn": hn, "wy": wy, "wh": wh, "grad.x": x.grad, "grad.h0": h0.grad, **extra}
    if cn is not None:
        t.update({"c0": c0, "cn": cn, "wc": wc, "grad.c0": c0.grad})
    for name, p in m.named_parameters():
        t["param." + name] = p
        t["grad." + name] = p.grad
    return {f"{case}.{k}": v.detach() for k, v in t.items()}


out = {}
torch.manual_seed(0)
for kind in KINDS:
    for layout in ("bf", "tm"):
        out.update(record(f"{kind}_{layout}", kind, layout))
for kind in KINDS:
    out.update(record(f"{kind}_packed", kind, "packed"))
save_safetensors(out, sys.argv[1])
print(f"rnn_twin.py: {len(out)} tensors from torch {torch.__version__}")
