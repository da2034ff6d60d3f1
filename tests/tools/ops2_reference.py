#!/usr/bin/env python3
# PyTorch 1.13 reference numbers embedded in tests/cpu/test_pad.cpp (and the other tests that name
# this script): run with /usr/bin/python3 tests/tools/ops2_reference.py SECTION, paste the output.
# Inputs are float64 arange or sin patterns the C++ tests rebuild exactly.
import math
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def fmt(t):
    vals = t.detach().reshape(-1).tolist()
    return "{" + ", ".join(repr(float(v)) if not float(v).is_integer() else str(int(v)) for v in vals) + "}"


def pad_section():
    # x = arange(24) as [1, 2, 3, 4] (or [2, 3, 4] unbatched); w = arange(1, numel + 1) of y's shape.
    cases = [
        ("constant", (1, 2, -1, 1), 0.5, (1, 2, 3, 4)),
        ("constant", (0, -2, 2, 0, 1, 1), -1.0, (1, 2, 3, 4)),
        ("reflect", (2, 1, 1, 2), None, (1, 2, 3, 4)),
        ("reflect", (3, -1), None, (2, 3, 4)),
        ("replicate", (1, 3, 2, 0), None, (2, 3, 4)),
        ("replicate", (1, 1, 0, 1, 1, 0), None, (1, 2, 3, 4)),
        ("circular", (-1, 2, 3, 1), None, (1, 2, 3, 4)),
        ("circular", (4, 0), None, (2, 3, 4)),
    ]
    for mode, pads, value, shape in cases:
        x = torch.arange(24.0).reshape(shape).requires_grad_()
        y = F.pad(x, pads, mode) if value is None else F.pad(x, pads, mode, value)
        w = torch.arange(1.0, y.numel() + 1).reshape(y.shape)
        (y * w).sum().backward()
        print(f'{{"{mode}", {{{", ".join(map(str, pads))}}}, {value if value is not None else "std::nullopt"}, '
              f'{{{", ".join(map(str, shape))}}}, {{{", ".join(map(str, y.shape))}}},\n {fmt(y)},\n {fmt(x.grad)}}},')


def pattern(shape, a, b, f=math.sin):
    n = math.prod(shape)
    return torch.tensor([f(a + b * i) for i in range(n)]).reshape(shape)


def adaptive_section():
    # x[i] = sin(0.3 + 1.1 i) as [1, 1, 5, 7]; w[j] = cos(0.2 + 0.7 j) of y's shape; grad = d(y * w).sum()/dx.
    for kind, size in [("avg", (2, 3)), ("avg", (3, 4)), ("avg", (1, 1)), ("avg", (6, 8)), ("max", (2, 3)),
                       ("max", (4, 5))]:
        x = pattern((1, 1, 5, 7), 0.3, 1.1).requires_grad_()
        if kind == "avg":
            y, idx = F.adaptive_avg_pool2d(x, size), None
        else:
            y, idx = F.adaptive_max_pool2d(x, size, return_indices=True)
        w = pattern(tuple(y.shape), 0.2, 0.7, math.cos)
        (y * w).sum().backward()
        print(f'{{{"true" if kind == "max" else "false"}, {{{size[0]}, {size[1]}}},\n {fmt(y)},\n '
              f'{fmt(idx) if idx is not None else "{}"},\n {fmt(x.grad)}}},')


def interpolate_section():
    # x = wave([1, 1, 3, 4], 0.3, 1.1); y = F.interpolate(x, ...); grad = d(y * w).sum()/dx, w = cos wave of y.
    cases = [
        ("nearest", (5, 7), None, None, None),
        ("nearest", None, (2.0, 2.0), None, None),
        ("nearest", None, (1.7, 0.6), None, None),
        ("nearest", None, (1.7, 1.3), None, True),
        ("bilinear", (5, 7), None, False, None),
        ("bilinear", (5, 7), None, True, None),
        ("bilinear", None, (2.5, 1.5), False, None),
        ("bilinear", (2, 3), None, False, None),
        ("bilinear", (1, 6), None, True, None),
    ]
    for mode, size, scale, align, recompute in cases:
        x = pattern((1, 1, 3, 4), 0.3, 1.1).requires_grad_()
        y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align,
                          recompute_scale_factor=recompute)
        w = pattern(tuple(y.shape), 0.2, 0.7, math.cos)
        (y * w).sum().backward()
        opt = "{" + (f".size = {{{size[0]}, {size[1]}}}, " if size else f".scale_factor = {{{scale[0]}, {scale[1]}}}, ")
        opt += f'.mode = "{mode}"'
        if align is not None:
            opt += f", .align_corners = {str(align).lower()}"
        if recompute is not None:
            opt += f", .recompute_scale_factor = {str(recompute).lower()}"
        opt += "}"
        print(f'{{{opt}, {{{", ".join(map(str, y.shape))}}},\n {fmt(y)},\n {fmt(x.grad)}}},')


def einsum_section():
    # Operand k = wave(shape_k, 0.3 + k, 1.1); y = torch.einsum(eq, *ops); grads of (y * w).sum() with
    # w = cos wave(y.shape, 0.2, 0.7).
    cases = [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk", [(2, 2, 3), (2, 3, 2)]),
        ("ii", [(3, 3)]),
        ("ii->i", [(3, 3)]),
        ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
        ("i,j->ij", [(3,), (2,)]),
        ("ijk,jil->kl", [(2, 3, 2), (3, 2, 3)]),
        ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
        ("iij->ji", [(2, 2, 3)]),
        ("bn,anm,bm->ba", [(2, 3), (2, 3, 2), (2, 2)]),
        ("ji", [(2, 3)]),
        ("Ab, bA ->", [(2, 3), (3, 2)]),
        ("i...->...", [(3, 2, 2)]),
    ]
    for eq, shapes in cases:
        ops = [pattern(sh, 0.3 + k, 1.1).requires_grad_() for k, sh in enumerate(shapes)]
        y = torch.einsum(eq, *ops)
        w = pattern(tuple(y.shape), 0.2, 0.7, math.cos)
        grads = torch.autograd.grad((y * w).sum(), ops)
        shp = ", ".join("{" + ", ".join(map(str, sh)) + "}" for sh in shapes)
        print(f'{{"{eq}", {{{shp}}}, {{{", ".join(map(str, y.shape))}}},\n {fmt(y)},\n {{{", ".join(fmt(g) for g in grads)}}}}},')


def conv_transpose_section():
    # x = wave(xs, 0.3, 1.1), weight = wave(ws, 1.3, 0.7), bias = wave([C_out], 2.3, 0.9); grads of (y * w).sum()
    # with w = cos wave(y.shape, 0.2, 0.7).
    cases = [
        ((1, 2, 3, 3), (2, 3, 2, 2), True, (1, 1), (0, 0), (0, 0), 1, (1, 1)),
        ((1, 4, 3, 4), (4, 1, 3, 2), True, (2, 1), (1, 0), (1, 0), 2, (1, 2)),
        ((2, 3, 3), (2, 2, 3, 3), False, (2, 2), (1, 1), (1, 1), 1, (1, 1)),
        ((1, 2, 3, 3), (2, 2, 2, 3), True, (1, 2), (0, 1), (1, 1), 1, (2, 1)),
    ]
    for xs, ws, has_bias, stride, padding, out_pad, groups, dilation in cases:
        x = pattern(xs, 0.3, 1.1).requires_grad_()
        wt = pattern(ws, 1.3, 0.7).requires_grad_()
        b = pattern((ws[1] * groups,), 2.3, 0.9).requires_grad_() if has_bias else None
        y = F.conv_transpose2d(x, wt, b, stride, padding, out_pad, groups, dilation)
        w = pattern(tuple(y.shape), 0.2, 0.7, math.cos)
        ins = [x, wt] + ([b] if has_bias else [])
        grads = torch.autograd.grad((y * w).sum(), ins)
        tup = lambda t: "{" + ", ".join(map(str, t)) + "}"
        print(f"{{{tup(xs)}, {tup(ws)}, {str(has_bias).lower()}, {tup(stride)}, {tup(padding)}, {tup(out_pad)}, "
              f"{groups}, {tup(dilation)}, {tup(y.shape)},\n {fmt(y)},\n {{{', '.join(fmt(g) for g in grads)}}}}},")


sections = {"pad": pad_section, "conv_transpose": conv_transpose_section, "adaptive": adaptive_section, "interpolate": interpolate_section,
            "einsum": einsum_section}
if __name__ == "__main__":
    for name in sys.argv[1:] or sections:
        sections[name]()
