#!/usr/bin/env python3
"""Summarises cuDNN API logs (CUDNN_LOGLEVEL_DBG=3, gzipped or not), one per run, as
tools/gpu-profile-cnn.sh writes them: how many cuDNN calls and internal graph/engine
finalizations each executed convolution cost, and which engine (with its knobs) ran each
convolution shape (the log names each engine about 3 times per call).

    python3 tools/cudnn_log_summary.py OUT/cudnn-off.log.gz OUT/cudnn-bf16.log.gz ...
"""
import collections
import gzip
import json
import re
import sys

CALL = re.compile(r"function (\w+)\(\) called")
API_LOG = re.compile(r"apiLog: type=json; val=(\{.*\});\s*$")


def summarise(path):
    opener = gzip.open if path.endswith(".gz") else open
    calls = collections.Counter()
    engines = collections.Counter()
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            m = CALL.search(line)
            if m:
                calls[m.group(1)] += 1
                continue
            m = API_LOG.search(line)
            if not m or '"engine"' not in line:
                continue
            try:
                log = json.loads(m.group(1))
            except json.JSONDecodeError:
                continue
            graph = log.get("operationGraph", {})
            dims = " x ".join(str(t["dim"]) for t in graph.get("tensors", []))
            dtype = graph.get("tensors", [{}])[0].get("dataType", "?").replace("CUDNN_DATA_", "")
            engine = log["engine"]
            knobs = ",".join(f"{k.replace('CUDNN_KNOB_TYPE_', '')}={v}" for k, v in engine.get("knobChoices", {}).items())
            engines[(graph.get("finalizeMode", "?"), dtype, dims, engine.get("engineId"), knobs)] += 1
    # An execution: the graph path calls cudnnBackendExecute itself; each legacy call
    # (HG_CUDNN_LEGACY_API=1) executes internally.
    runs = calls["cudnnBackendExecute"] or calls["cudnnBackendExecuteInternal"]
    print(f"== {path}")
    if runs == 0:
        print("   no executed convolutions in this log")
        return
    print(f"   executions {runs}; per execution: {sum(calls.values()) / runs:.1f} cuDNN calls, "
          f"{calls['cudnnBackendFinalizeGraphVisualize'] / runs:.2f} graph and "
          f"{calls['cudnnBackendFinalizeEngineCfgVisualize'] / runs:.2f} engine-config finalizations")
    # The engines that ran appear on every call; the heuristic's other candidates, logged while
    # an algorithm is first chosen for a shape, a few times each.
    top = max(engines.values(), default=0)
    shown = {key: n for key, n in engines.items() if n >= top / 20}
    for (mode, dtype, dims, engine, knobs), n in sorted(shown.items(), key=lambda kv: -kv[1]):
        print(f"   {n:6d} x {mode} {dtype} {dims}: engine {engine} {knobs}")
    rest = len(engines) - len(shown)
    if rest:
        print(f"   ({rest} other engine configurations logged a few times each: the heuristic's candidates)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarise(p)
