#!/usr/bin/env python3
"""PyTorch twin of examples/char_transformer.cpp: the same word split and batches (SplitMix64
counters drawn bit for bit as the C++ does), the same model (pre-norm TransformerEncoderLayers with
a causal mask, tied head), initialisation scheme, AdamW groups and warm-up + cosine schedule, and
the same closing JSON line. Run:
  /usr/bin/python3 tools/char_transformer_torch.py --steps 1000 --amp bf16
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1
VOCAB = 28  # 0 boundary, 1..26 a..z, 27 apostrophe
SHUFFLE, BATCHES, SAMPLING = 1, 2, 3


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def stream_key(seed, stream):
    return splitmix64((seed + splitmix64(stream)) & MASK)


def token_of(c):
    return 27 if c == "'" else ord(c) - ord("a") + 1


def char_of(t):
    return "'" if t == 27 else chr(ord("a") + t - 1)


def load_words(path, seed):
    words, seen = [], set()
    ok = set("abcdefghijklmnopqrstuvwxyz'")
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            # C++ lower-cases byte by byte (ASCII only) and splits on '\n'.
            w = "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in line.rstrip("\n"))
            if w and all(ch in ok for ch in w) and w not in seen:
                seen.add(w)
                words.append(w)
    key = stream_key(seed, SHUFFLE)
    for i in range(len(words) - 1, 0, -1):
        j = splitmix64((key + i) & MASK) % (i + 1)
        words[i], words[j] = words[j], words[i]
    n_val = len(words) // 10
    train, val = [0], [0]
    for i, w in enumerate(words):
        s = train if i < len(words) - n_val else val
        s.extend(token_of(ch) for ch in w)
        s.append(0)
    return train, val, len(words) - n_val, n_val


def windows(s, starts, T):
    x = torch.tensor([s[b:b + T] for b in starts], dtype=torch.int64)
    y = torch.tensor([s[b + 1:b + T + 1] for b in starts], dtype=torch.int64)
    return x, y


class CharGPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, a.embd)
        self.pos_emb = nn.Embedding(a.context, a.embd)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(a.embd, a.heads, 4 * a.embd, a.dropout, activation="gelu",
                                       layer_norm_eps=1e-5, batch_first=True, norm_first=True)
            for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.embd)
        for name, p in self.named_parameters():  # the C++ scheme: matrices N(0, 0.02), biases 0, norms 1
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            if name.endswith("bias"):
                nn.init.zeros_(p)
        mask = torch.full((a.context, a.context), float("-inf")).triu(1)
        self.register_buffer("causal", mask, persistent=False)

    def forward(self, idx):
        T = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        for block in self.blocks:
            x = block(x, src_mask=self.causal[:T, :T])
        return F.linear(self.ln_f(x), self.tok_emb.weight)


def loss_of(model, x, y, amp):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
        logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))


@torch.no_grad()
def evaluate(model, s, count, a):
    model.eval()
    span = len(s) - a.context - 1
    count = min(count, span + 1)
    total = 0.0
    for first in range(0, count, a.batch_size):
        starts = [w * span // count for w in range(first, min(count, first + a.batch_size))]
        x, y = windows(s, starts, a.context)
        total += loss_of(model, x, y, a.amp).item() * len(starts)
    model.train()
    return total / count


def unigram_entropy(s):
    n = [0] * VOCAB
    for t in s:
        n[t] += 1
    return -sum(k / len(s) * math.log(k / len(s)) for k in n if k)


@torch.no_grad()
def sample_words(model, count, a):
    model.eval()
    key, draw, out = stream_key(a.seed, SAMPLING), 0, []
    for _ in range(count):
        ctx, word = [0], ""
        while len(word) < 40:
            tail = ctx[-a.context:]
            probs = torch.softmax(model(torch.tensor([tail]))[0, -1].float(), 0).tolist()
            u = (splitmix64((key + draw) & MASK) >> 11) * 2.0**-53
            draw += 1
            t, acc = VOCAB - 1, 0.0
            for k, p in enumerate(probs):
                acc += p
                if u < acc:
                    t = k
                    break
            if t == 0:
                break
            word += char_of(t)
            ctx.append(t)
        out.append(word)
    model.train()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--words", default="/usr/share/dict/american-english")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--eval-windows", type=int, default=512)
    p.add_argument("--amp", choices=["off", "bf16"], default="off")  # CPU autocast: bfloat16 only
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    train, val, n_train, n_val = load_words(a.words, a.seed)
    print(f"{n_train} training words ({len(train)} tokens), {n_val} validation words ({len(val)} tokens)")
    torch.manual_seed(a.seed)
    model = CharGPT(a)
    decay, plain = [], []
    for name, q in model.named_parameters():
        (decay if q.dim() >= 2 and not name.startswith(("tok_emb", "pos_emb")) else plain).append(q)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    n_params = sum(q.numel() for q in model.parameters())
    print(f"{n_params} parameters, {a.layers} layers, {a.heads} heads, embd {a.embd}, context {a.context}")

    warmup = min(a.warmup, a.steps // 10)

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, a.steps - warmup)
        return a.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))

    batch_key = stream_key(a.seed, BATCHES)
    span = len(train) - a.context
    step_ms, recent = [], 0.0
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = [splitmix64((batch_key + step * a.batch_size + b) & MASK) % span for b in range(a.batch_size)]
        x, y = windows(train, starts, a.context)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, x, y, a.amp)
        loss.backward()
        opt.step()
        l = loss.item()
        step_ms.append((time.perf_counter() - t0) * 1000)
        recent = l if step == 0 else 0.98 * recent + 0.02 * l
        if (step + 1) % max(1, a.steps // 10) == 0 or step + 1 == a.steps:
            print(f"step {step + 1}/{a.steps} loss {l:.4f} (smoothed {recent:.4f}) lr {lr_at(step):.2e} "
                  f"{step_ms[-1]:.1f} ms/step", flush=True)

    train_loss = evaluate(model, train, a.eval_windows, a)
    val_loss = evaluate(model, val, a.eval_windows, a)
    for w in sample_words(model, a.sample, a):
        print(f"sample: {w}")
    step_ms.sort()
    print(json.dumps({"model": "char_transformer", "framework": "pytorch " + torch.__version__, "device": "cpu",
                      "amp": a.amp, "seed": a.seed, "steps": a.steps, "layers": a.layers, "heads": a.heads,
                      "embd": a.embd, "context": a.context, "batch_size": a.batch_size, "params": n_params,
                      "unigram_entropy": round(unigram_entropy(train), 4), "train_loss": round(train_loss, 4),
                      "val_loss": round(val_loss, 4), "step_ms_median": round(step_ms[len(step_ms) // 2], 2)},
                     separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
