"""The benchmark and example models for the PyTorch twins (tools/mnist_torch.py,
tools/amp_bench_torch.py), defined once as layer tables. The C++ definitions are
examples/models.h (mnist_mlp, mnist_cnn) and tools/amp_bench/models.cpp (linear, wide_mlp).

`python3 tools/mnist_models.py --check PROGRAM` needs no torch: it runs PROGRAM (tests/model_spec.cpp),
which prints each C++ model's named parameter shapes, and compares them with these tables."""
import subprocess
import sys

# Each layer: (kind, arguments), as torch.nn names and arguments them.
LAYERS = {
    "linear": [("Flatten",), ("Linear", 784, 10)],
    "mnist_mlp": [("Flatten",), ("Linear", 784, 512), ("ReLU",), ("Linear", 512, 512), ("ReLU",),
                  ("Linear", 512, 10)],
    "mnist_cnn": [("Conv2d", 1, 32, 3), ("ReLU",), ("Conv2d", 32, 64, 3), ("ReLU",), ("MaxPool2d", 2),
                  ("Flatten",), ("Linear", 9216, 128), ("ReLU",), ("Linear", 128, 10)],
    "wide_mlp": [("Linear", 4096, 4096), ("ReLU",), ("Linear", 4096, 4096), ("ReLU",), ("Linear", 4096, 4096),
                 ("ReLU",), ("Linear", 4096, 4096)],
}


def param_shapes(name):
    """[(parameter name, shape)] in torch.nn.Sequential's order and naming, without torch."""
    out = []
    for i, (kind, *a) in enumerate(LAYERS[name]):
        if kind == "Linear":
            out += [(f"{i}.weight", (a[1], a[0])), (f"{i}.bias", (a[1],))]
        elif kind == "Conv2d":
            out += [(f"{i}.weight", (a[1], a[0], a[2], a[2])), (f"{i}.bias", (a[1],))]
    return out


def build(torch, name):
    """The model as a torch.nn.Sequential (PyTorch's default initialisation)."""
    return torch.nn.Sequential(*[getattr(torch.nn, kind)(*a) for kind, *a in LAYERS[name]])


def spec_lines(name):
    return [f"{name} {p} {'x'.join(map(str, s))}" for p, s in param_shapes(name)]


def check(program):
    got = subprocess.run([program], check=True, capture_output=True, text=True).stdout.split("\n")
    got = [line for line in got if line]
    want = [line for name in LAYERS for line in spec_lines(name)]
    if got != want:
        print("C++ models and tools/mnist_models.py differ:", file=sys.stderr)
        for line in sorted(set(got) ^ set(want)):
            print(("  C++ only:    " if line in got else "  Python only: ") + line, file=sys.stderr)
        if set(got) == set(want):
            print("  (same parameters, different order)", file=sys.stderr)
        return 1
    print(f"{len(want)} parameters of {len(LAYERS)} models agree")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    for model in LAYERS:
        print("\n".join(spec_lines(model)))
