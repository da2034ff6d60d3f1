#!/usr/bin/env python3
"""PyTorch twin of examples/gpt2.cpp: the same GPT-2 (Hugging Face's names and Conv1D layouts,
the head tied to wte's first --vocab rows), the same token streams (SplitMix64 counters, or the
llm.c token files read in the same order), AdamW groups, warm-up + cosine schedule, clipping and
accumulation, and the same progress and JSON lines. --init loads the weights the C++ wrote with
--save-init, so both start from the same point. Run:
  build/examples/gpt2 --model tiny --steps 20 --save-init /tmp/init.safetensors
  /usr/bin/python3 tools/gpt2_torch.py --model tiny --steps 20 --init /tmp/init.safetensors
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1
TRAIN_TOKENS, VAL_TOKENS, SAMPLING = 1, 2, 3
SIZES = {"d12": (12, 12, 768, 1024), "d6": (6, 6, 384, 1024), "d4": (4, 4, 256, 1024), "tiny": (2, 2, 64, 64)}


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def splitmix64_np(x):  # uint64 arrays wrap modulo 2^64, as the C++ does
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def stream_key(seed, stream):
    return splitmix64((seed + splitmix64(stream)) & MASK)


# ---- safetensors without the safetensors package (Debian's python3-torch lacks it) ----
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=DTYPES[v["dtype"]]) if b > a else torch.empty(0, dtype=DTYPES[v["dtype"]])
        out[k] = t.reshape(v["shape"]).clone()
    return out


def save_safetensors(tensors, path):
    names = {v: k for k, v in DTYPES.items()}
    header, blobs, offset = {}, [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the token streams ----
class TokenStream:
    def __init__(self, vocab, seed=None, stream=None, path=None):
        self.vocab = vocab
        if path is None:
            self.key, self.tokens = stream_key(seed, stream), None
            self.size = (2**63 - 1) // 2
        else:
            self.tokens = read_token_file(path, vocab)
            self.size = len(self.tokens)

    def range(self, pos, n):
        if self.tokens is not None:
            return self.tokens[pos:pos + n].astype(np.int64)
        idx = np.uint64(self.key) + np.arange(pos, pos + n, dtype=np.uint64)
        return (splitmix64_np(idx) % np.uint64(self.vocab)).astype(np.int64)

    def batch(self, pos, rows, T):
        buf = torch.from_numpy(self.range(pos, rows * T + 1))
        return buf[:-1].view(rows, T), buf[1:].view(rows, T)

    def advance(self, pos, B, T):
        pos += B * T
        return 0 if pos + B * T + 1 > self.size else pos


def read_token_file(path, vocab):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if len(header) != 256 or header[0] != 20240520 or header[1] != 1 or header[2] != len(tokens):
        sys.exit(f"error: {path}: not an llm.c token file of version 1 with a matching count")
    if len(tokens) and int(tokens.max()) >= vocab:
        sys.exit(f"error: {path}: a token is not below the vocabulary size {vocab}")
    return tokens


# ---- the model, Hugging Face's GPT-2 ----
class Conv1D(nn.Module):
    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c.heads
        self.c_attn = Conv1D(c.embd, 3 * c.embd)
        self.c_proj = Conv1D(c.embd, c.embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(c.embd, 4 * c.embd)
        self.c_proj = Conv1D(4 * c.embd, c.embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.embd)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.embd)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def padded(vocab):
    return (vocab + 127) // 128 * 128


class GPT2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.vocab = c.vocab
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(padded(c.vocab), c.embd), wpe=nn.Embedding(c.context, c.embd),
            h=nn.ModuleList(Block(c) for _ in range(c.layers)), ln_f=nn.LayerNorm(c.embd)))
        for name, p in self.named_parameters():  # the C++ scheme (llm.c's), for runs without --init
            if name.endswith("bias"):
                nn.init.zeros_(p)
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.layers) if name.endswith("c_proj.weight") else 0.02)
        with torch.no_grad():
            self.transformer.wte.weight[c.vocab:].zero_()

    def forward(self, idx):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return F.linear(self.transformer.ln_f(x), self.transformer.wte.weight[:self.vocab])

    def load_hf(self, sd):
        """Hugging Face names, with or without "transformer.", attn.bias buffers skipped, wte unpadded."""
        own = {}
        for k, v in sd.items():
            if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            own[k if k.startswith("transformer.") else "transformer." + k] = v
        wte = own["transformer.wte.weight"]
        if wte.size(0) != padded(self.vocab):
            own["transformer.wte.weight"] = torch.cat([wte, wte.new_zeros(padded(self.vocab) - wte.size(0),
                                                                           wte.size(1))])
        self.load_state_dict(own)

    def hf_state_dict(self):
        sd = dict(self.state_dict())
        sd["transformer.wte.weight"] = sd["transformer.wte.weight"][:self.vocab]
        return sd


def loss_of(model, x, y, amp, device):
    if amp == "off":
        logits = model(x)
    else:
        with torch.autocast(device, dtype=torch.bfloat16 if amp == "bf16" else torch.float16):
            logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


@torch.no_grad()
def evaluate(model, s, a, device):
    model.eval()
    total, pos = 0.0, 0
    for _ in range(a.val_batches):
        x, y = s.batch(pos, a.batch_size, a.context)
        total += loss_of(model, x.to(device), y.to(device), a.amp, device).item()
        pos = s.advance(pos, a.batch_size, a.context)
    model.train()
    return total / a.val_batches


@torch.no_grad()
def sample_tokens(model, a, device):
    model.eval()
    key, ctx, out = stream_key(a.seed, SAMPLING), [a.vocab - 1], []
    for i in range(a.sample):
        tail = ctx[-a.context:]
        l = model(torch.tensor([tail], device=device))[0, -1].double().cpu().tolist()
        top = max(l)
        token = l.index(top)
        if a.temperature > 0:
            threshold = sorted(l, reverse=True)[a.top_k - 1] if 0 < a.top_k < a.vocab else -math.inf
            p = [math.exp((v - top) / a.temperature) if v >= threshold else 0.0 for v in l]
            u = (splitmix64((key + i) & MASK) >> 11) * 2.0**-53 * sum(p)
            acc = 0.0
            for k, q in enumerate(p):
                acc += q
                if q > 0 and u < acc:
                    token = k
                    break
        ctx.append(token)
        out.append(token)
    model.train()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(SIZES), default="tiny")
    for flag in ("--layers", "--heads", "--embd", "--context"):
        p.add_argument(flag, type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--data", default="synthetic")
    p.add_argument("--init", default="", help="initial weights (Hugging Face names), e.g. from gpt2 --save-init")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--total-batch-tokens", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=700)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--final-lr-frac", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--val-every", type=int, default=0)
    p.add_argument("--val-batches", type=int, default=10)
    p.add_argument("--print-every", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--compile", action="store_true", help="torch.compile the model (on a GPU)")
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dump-logits", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = argparse.Namespace(**dict(zip(("layers", "heads", "embd", "context"), SIZES[a.model])), vocab=a.vocab)
    for k in ("layers", "heads", "embd", "context"):
        if getattr(a, k):
            setattr(c, k, getattr(a, k))
    a.context = c.context
    if c.embd % c.heads:
        sys.exit(f"error: --heads {c.heads} does not divide --embd {c.embd}")
    micro = a.batch_size * c.context
    total = a.total_batch_tokens or micro
    if total % micro:
        sys.exit(f"error: --total-batch-tokens {total} is not a multiple of {micro}")
    accum = total // micro
    warmup = min(a.warmup, a.steps // 10)
    device = a.device

    if a.data == "synthetic":
        train, val = TokenStream(c.vocab, a.seed, TRAIN_TOKENS), TokenStream(c.vocab, a.seed, VAL_TOKENS)
    else:
        train, val = TokenStream(c.vocab, path=a.data + "train.bin"), TokenStream(c.vocab, path=a.data + "val.bin")
    torch.manual_seed(a.seed)
    model = GPT2(c)
    if a.init:
        model.load_hf(load_safetensors(a.init))
    model.to(device)
    if a.dump_logits:
        with torch.no_grad():
            x, _ = val.batch(0, a.batch_size, c.context)
            save_safetensors({"logits": model(x.to(device)).float(), "tokens": x}, a.dump_logits)
    net = model
    if a.compile:  # torch.compile pays off on a GPU; on the CPU (and before torch 2.0) the model runs eagerly
        if device == "cuda" and hasattr(torch, "compile"):
            net = torch.compile(model)
        else:
            print("--compile: needs torch >= 2.0 and --device cuda; running eagerly")
    decay = [q for q in model.parameters() if q.dim() >= 2]
    plain = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": plain, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    scaler = torch.cuda.amp.GradScaler(enabled=a.amp == "fp16")
    n_params = sum(q.numel() for q in model.parameters())
    print(f"{n_params} parameters, {c.layers} layers, {c.heads} heads, embd {c.embd}, context {c.context}, "
          f"vocab {c.vocab} (padded {padded(c.vocab)}), {accum} micro-batch(es) of {a.batch_size} x {c.context} per step")

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, a.steps - warmup))
        min_lr = a.lr * a.final_lr_frac
        return min_lr + 0.5 * (a.lr - min_lr) * (1.0 + math.cos(math.pi * progress))

    print_every = a.print_every or max(1, a.steps // 10)
    pos, step_ms, recent, last, val_loss = 0, [], 0.0, float("nan"), float("nan")
    for step in range(a.steps):
        if a.val_every and step % a.val_every == 0:
            val_loss = evaluate(model, val, a, device)
            print(f"step {step}/{a.steps} val loss {val_loss:.6f}")
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(accum):
            x, y = train.batch(pos, a.batch_size, c.context)
            pos = train.advance(pos, a.batch_size, c.context)
            loss = loss_of(net, x.to(device), y.to(device), a.amp, device) / accum
            scaler.scale(loss).backward()
            loss_sum += loss.item()
        norm = 0.0
        if a.grad_clip > 0:
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip).item()
        scaler.step(opt)
        scaler.update()
        step_ms.append((time.perf_counter() - t0) * 1000)
        last = loss_sum
        recent = loss_sum if step == 0 else 0.98 * recent + 0.02 * loss_sum
        if (step + 1) % print_every == 0 or step + 1 == a.steps:
            print(f"step {step + 1}/{a.steps} loss {loss_sum:.6f} (smoothed {recent:.4f}) lr {lr:.2e} norm {norm:.4f} "
                  f"{step_ms[-1]:.1f} ms/step {total / step_ms[-1] * 1000:.0f} tok/s", flush=True)

    val_loss = evaluate(model, val, a, device)
    print(f"step {a.steps}/{a.steps} val loss {val_loss:.6f}")
    if a.sample:
        print("sample: " + " ".join(str(t) for t in sample_tokens(model, a, device)))
    median = sorted(step_ms)[len(step_ms) // 2] if step_ms else 0.0
    print(json.dumps({"model": "gpt2", "framework": "pytorch " + torch.__version__, "device": device, "amp": a.amp,
                      "seed": a.seed, "steps": a.steps, "layers": c.layers, "heads": c.heads, "embd": c.embd,
                      "context": c.context, "vocab": c.vocab, "batch_size": a.batch_size, "total_batch_tokens": total,
                      "params": n_params, "train_loss": round(last, 6), "val_loss": round(val_loss, 6),
                      "step_ms_median": round(median, 2),
                      "tokens_per_s": round(total / median * 1000) if median else 0}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
