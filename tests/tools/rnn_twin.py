# PyTorch 1.13's nn.LSTM, nn.GRU and nn.RNN (tanh, relu) at 2 layers, bidirectional, batch-first
# and time-major: weights, input, initial state, outputs and every gradient of a weighted sum of
# the outputs, into one safetensors file for tests/tools/rnn_twin.cpp to compare halfgrad with;
# and each module on a packed batch of unsorted lengths (pack_padded_sequence, enforce_sorted=False).
# Usage: rnn_twin.py OUT.safetensors
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from gpt2_torch import save_safetensors  # noqa: E402

IN, HIDDEN, LAYERS, N, L, PROJ = 5, 7, 2, 3, 6, 3
out = {}
torch.manual_seed(0)
for kind in ("lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu"):
    for batch_first in (True, False):
        case = f"{kind}_{'bf' if batch_first else 'tm'}"
        opts = dict(num_layers=LAYERS, bidirectional=True, batch_first=batch_first)
        if kind == "lstm":
            m = torch.nn.LSTM(IN, HIDDEN, **opts)
        elif kind == "lstm_proj":
            m = torch.nn.LSTM(IN, HIDDEN, proj_size=PROJ, **opts)
        elif kind == "gru":
            m = torch.nn.GRU(IN, HIDDEN, **opts)
        else:
            m = torch.nn.RNN(IN, HIDDEN, nonlinearity=kind[4:], **opts)
        x = torch.randn((N, L, IN) if batch_first else (L, N, IN), requires_grad=True)
        h0 = torch.randn(2 * LAYERS, N, PROJ if kind == "lstm_proj" else HIDDEN, requires_grad=True)
        c0 = torch.randn(2 * LAYERS, N, HIDDEN, requires_grad=True)
        if kind.startswith("lstm"):
            y, (hn, cn) = m(x, (h0, c0))
        else:
            y, hn = m(x, h0)
            cn = None
        wy, wh, wc = torch.randn_like(y), torch.randn_like(hn), torch.randn_like(c0)
        loss = (y * wy).sum() + (hn * wh).sum() + ((cn * wc).sum() if cn is not None else 0)
        loss.backward()
        t = {"x": x, "h0": h0, "y": y, "hn": hn, "wy": wy, "wh": wh, "grad.x": x.grad, "grad.h0": h0.grad}
        if cn is not None:
            t.update({"c0": c0, "cn": cn, "wc": wc, "grad.c0": c0.grad})
        for name, p in m.named_parameters():
            t["param." + name] = p
            t["grad." + name] = p.grad
        out.update({f"{case}.{k}": v.detach() for k, v in t.items()})
# Packed: batch-first [N, L, IN] padded input of lengths 4, 6, 1, packed unsorted, unpacked after.
LENGTHS = [4, 6, 1]
for kind in ("lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu"):
    case = f"{kind}_packed"
    opts = dict(num_layers=LAYERS, bidirectional=True, batch_first=True)
    if kind == "lstm":
        m = torch.nn.LSTM(IN, HIDDEN, **opts)
    elif kind == "lstm_proj":
        m = torch.nn.LSTM(IN, HIDDEN, proj_size=PROJ, **opts)
    elif kind == "gru":
        m = torch.nn.GRU(IN, HIDDEN, **opts)
    else:
        m = torch.nn.RNN(IN, HIDDEN, nonlinearity=kind[4:], **opts)
    x = torch.randn(N, L, IN, requires_grad=True)
    h0 = torch.randn(2 * LAYERS, N, PROJ if kind == "lstm_proj" else HIDDEN, requires_grad=True)
    c0 = torch.randn(2 * LAYERS, N, HIDDEN, requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    if kind.startswith("lstm"):
        yp, (hn, cn) = m(packed, (h0, c0))
    else:
        yp, hn = m(packed, h0)
        cn = None
    y, lengths = torch.nn.utils.rnn.pad_packed_sequence(yp, batch_first=True)
    wy, wh, wc = torch.randn_like(y), torch.randn_like(hn), torch.randn_like(c0)
    loss = (y * wy).sum() + (hn * wh).sum() + ((cn * wc).sum() if cn is not None else 0)
    loss.backward()
    t = {"x": x, "h0": h0, "y": y, "hn": hn, "wy": wy, "wh": wh, "grad.x": x.grad, "grad.h0": h0.grad,
         "lengths": lengths, "packed": yp.data, "batch_sizes": yp.batch_sizes}
    if cn is not None:
        t.update({"c0": c0, "cn": cn, "wc": wc, "grad.c0": c0.grad})
    for name, p in m.named_parameters():
        t["param." + name] = p
        t["grad." + name] = p.grad
    out.update({f"{case}.{k}": v.detach() for k, v in t.items()})
save_safetensors(out, sys.argv[1])
print(f"rnn_twin.py: {len(out)} tensors from torch {torch.__version__}")
