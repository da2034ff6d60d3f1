#!/usr/bin/env python3
"""Sets the figures tools/gpu-perf.sh collected side by side: writes OUT/gpu-perf.json and
OUT/gpu-perf.md (mm, attention, the GPT-2 step against PyTorch eager and torch.compile, the op
profile), with the GPU issue's targets marked met or not. Usage: gpu_perf_report.py OUT"""
import datetime
import json
import os
import subprocess
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def commit():
    if os.path.exists(".carry/COMMIT"):
        return text(".carry/COMMIT").strip()
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "none (CPU dry run)"


def mark(ok):
    return "-" if ok is None else ("met" if ok else "NOT met")


def ratio(a, b):
    return a / b if a and b else None


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def main():
    out = sys.argv[1]
    hg_ops, torch_ops = load(f"{out}/op_bench_hg.json"), load(f"{out}/op_bench_torch.json")
    eager, compiled = load(f"{out}/amp_bench_gpt2.json"), load(f"{out}/amp_bench_gpt2_compile.json")
    report = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "commit": commit(), "gpu": gpu_name(), "mm": [], "sdpa": [], "gpt2": []}
    if torch_ops:
        report["torch"] = torch_ops["framework"]

    def torch_row(row):
        for t in (torch_ops or {}).get("results", []):
            if t["op"] == row["op"] and t["dtype"] == row["dtype"] and t.get("n") == row.get("n"):
                return t
        return None

    for r in (hg_ops or {}).get("results", []):
        t = torch_row(r)
        if r["op"] == "mm":
            frac = ratio(r["tflops"], t and t["tflops"])
            report["mm"].append({"dtype": r["dtype"], "n": r["n"], "halfgrad_tflops": r["tflops"],
                                 "torch_tflops": t and t["tflops"], "fraction_of_torch": frac,
                                 "target_90pct": None if frac is None or r["dtype"] == "tf32" else frac >= 0.9})
        else:
            slower = ratio(r["forward_backward_ms"], t and t["forward_backward_ms"])
            report["sdpa"].append({"dtype": r["dtype"], "shape": r["shape"], "causal": r["causal"],
                                   "halfgrad_forward_ms": r["forward_ms"],
                                   "halfgrad_forward_backward_ms": r["forward_backward_ms"],
                                   "torch_forward_ms": t and t["forward_ms"],
                                   "torch_forward_backward_ms": t and t["forward_backward_ms"],
                                   "torch_note": t and t.get("note", ""), "time_vs_torch": slower,
                                   "target_1_5x": None if slower is None else slower <= 1.5})

    def cells(doc):
        return {c["precision"]: c for c in (doc or {}).get("results", []) if c["model"] == "gpt2"}

    compiled_cells = cells(compiled)
    for prec, c in cells(eager).items():
        h, t = c["halfgrad"], c.get("torch") or {}
        tc = (compiled_cells.get(prec) or {}).get("torch") or {}
        if tc.get("note") != "torch.compile":  # ran eagerly (no torch >= 2.0 or no GPU): not a compile figure
            tc = {}
        ok = h.get("status") == "ok"
        row = {"precision": prec, "batch": c["batch"], "tokens_per_step": c["tokens_per_step"],
               "halfgrad_status": h.get("status"), "halfgrad_note": h.get("note", ""),
               "halfgrad_step_ms": ok and h["step_ms"]["median"] or None,
               "halfgrad_tokens_per_s": h.get("tokens_per_s"), "halfgrad_mfu": h.get("mfu"),
               "halfgrad_peak_bytes": h.get("peak_bytes"),
               "torch_eager_step_ms": t.get("status") == "ok" and t["step_ms"]["median"] or None,
               "torch_eager_tokens_per_s": t.get("tokens_per_s"), "torch_eager_peak_bytes": t.get("peak_bytes"),
               "torch_compile_step_ms": tc.get("status") == "ok" and tc["step_ms"]["median"] or None,
               "torch_compile_tokens_per_s": tc.get("tokens_per_s"),
               "torch_compile_note": tc.get("note", "")}
        row["vs_eager"] = ratio(row["halfgrad_step_ms"], row["torch_eager_step_ms"])
        row["vs_compile"] = ratio(row["halfgrad_step_ms"], row["torch_compile_step_ms"])
        if prec == "bf16" and row["halfgrad_tokens_per_s"]:
            row["target_500k_tokens_per_s"] = row["halfgrad_tokens_per_s"] >= 500e3
            row["target_0_8x_eager"] = None if row["vs_eager"] is None else row["vs_eager"] <= 0.8
            row["target_1_0x_compile"] = None if row["vs_compile"] is None else row["vs_compile"] <= 1.0
            hp, tp = row["halfgrad_peak_bytes"], row["torch_eager_peak_bytes"]
            row["target_memory_le_eager"] = None if not (hp and tp) else hp <= tp
        report["gpt2"].append(row)
    # The resnet cell (ResNet-50, 3x224x224, channels-last on cuda) beside PyTorch eager, channels-last too.
    report["resnet"] = []
    for c in (load(f"{out}/amp_bench_resnet.json") or {}).get("results", []):
        h, t = c["halfgrad"], c.get("torch") or {}
        hms = h.get("status") == "ok" and h["step_ms"]["median"] or None
        tms = t.get("status") == "ok" and t["step_ms"]["median"] or None
        row = {"precision": c["precision"], "batch": c["batch"], "halfgrad_status": h.get("status"),
               "halfgrad_note": h.get("note", ""), "halfgrad_step_ms": hms, "torch_eager_step_ms": tms,
               "halfgrad_images_per_s": hms and c["batch"] * 1000.0 / hms or None,
               "torch_eager_images_per_s": tms and c["batch"] * 1000.0 / tms or None,
               "vs_eager": ratio(hms, tms)}
        if c["precision"] in ("bf16", "fp16") and row["halfgrad_images_per_s"] and row["torch_eager_images_per_s"]:
            row["target_images_ge_eager"] = row["halfgrad_images_per_s"] >= row["torch_eager_images_per_s"]
        report["resnet"].append(row)
    report["profile"] = text(f"{out}/gpt2_profile.txt")
    report["steps"] = text(f"{out}/perf-steps.txt")
    with open(f"{out}/gpu-perf.json", "w") as f:
        json.dump(report, f, indent=1)

    md = [f"# halfgrad gpu-perf", "", f"- date: {report['date']}", f"- commit: {report['commit']}",
          f"- gpu: {report['gpu']}", f"- PyTorch: {report.get('torch', 'not run')}", "", "## Steps", "",
          report["steps"].rstrip(), "", "## mm (TFLOP/s; target: bf16/fp16 >= 90% of torch.matmul)", "",
          "| dtype | n | halfgrad | PyTorch | fraction | target |", "|---|---|---|---|---|---|"]
    for m in report["mm"]:
        md.append(f"| {m['dtype']} | {m['n']} | {fmt(m['halfgrad_tflops'], '.1f')} | {fmt(m['torch_tflops'], '.1f')} "
                  f"| {fmt(m['fraction_of_torch'])} | {mark(m['target_90pct'])} |")
    md += ["", "## Attention forward+backward (ms; target <= 1.5x PyTorch's)", "",
           "| dtype | B,H,T,D | halfgrad fwd | fwd+bwd | PyTorch fwd | fwd+bwd | time vs PyTorch | target |",
           "|---|---|---|---|---|---|---|---|"]
    for s in report["sdpa"]:
        md.append(f"| {s['dtype']} | {','.join(map(str, s['shape']))} | {fmt(s['halfgrad_forward_ms'])} "
                  f"| {fmt(s['halfgrad_forward_backward_ms'])} | {fmt(s['torch_forward_ms'])} "
                  f"| {fmt(s['torch_forward_backward_ms'])} | {fmt(s['time_vs_torch'])} | {mark(s['target_1_5x'])} |")
    md += ["", "## GPT-2 step (amp_bench gpt2 cell)", "",
           "| prec | batch | halfgrad ms | tokens/s | MFU | peak GiB | eager ms | compile ms | vs eager | vs compile |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for g in report["gpt2"]:
        gib = g["halfgrad_peak_bytes"] / 2**30 if g["halfgrad_peak_bytes"] else None
        mfu = 100 * g["halfgrad_mfu"] if g["halfgrad_mfu"] is not None else None
        md.append(f"| {g['precision']} | {g['batch']} | {fmt(g['halfgrad_step_ms'], '.1f')} "
                  f"| {fmt(g['halfgrad_tokens_per_s'], '.0f')} | {fmt(mfu, '.1f')}% | {fmt(gib)} "
                  f"| {fmt(g['torch_eager_step_ms'], '.1f')} | {fmt(g['torch_compile_step_ms'], '.1f')} "
                  f"| {fmt(g['vs_eager'])} | {fmt(g['vs_compile'])} |")
        if g["halfgrad_status"] != "ok":
            md.append(f"\nhalfgrad {g['precision']}: {g['halfgrad_status']}: {g['halfgrad_note']}\n")
    for g in report["gpt2"]:
        if g["precision"] == "bf16" and "target_500k_tokens_per_s" in g:
            md += ["", "Targets (bf16): 500K tokens/s " + mark(g["target_500k_tokens_per_s"]) +
                   "; <= 0.8x eager " + mark(g["target_0_8x_eager"]) + "; <= 1.0x torch.compile " +
                   mark(g["target_1_0x_compile"]) + "; peak memory <= eager's " + mark(g["target_memory_le_eager"])]
    md += ["", "## ResNet-50 step (amp_bench resnet cell; AMP target: images/s >= PyTorch eager's, channels-last)",
           "", "| prec | batch | network | halfgrad ms | images/s | eager ms | eager images/s | vs eager | target |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in report["resnet"]:
        md.append(f"| {r['precision']} | {r['batch']} | {r['halfgrad_note']} | {fmt(r['halfgrad_step_ms'], '.1f')} "
                  f"| {fmt(r['halfgrad_images_per_s'], '.0f')} | {fmt(r['torch_eager_step_ms'], '.1f')} "
                  f"| {fmt(r['torch_eager_images_per_s'], '.0f')} | {fmt(r['vs_eager'])} "
                  f"| {mark(r.get('target_images_ge_eager'))} |")
    md += ["", "## Op profile (examples/gpt2 --profile, bf16)", "", "```", report["profile"].rstrip(), "```", ""]
    with open(f"{out}/gpu-perf.md", "w") as f:
        f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
