"""One instrumented start-up in a fresh process, for benchmarks/whatif_validation.py.

    python benchmarks/_whatif_child.py touch DIR                 # read the shards, touch every page
    python benchmarks/_whatif_child.py cast DIR DTYPE            # read the shards, cast every tensor
    python benchmarks/_whatif_child.py compile                   # torch.compile a function, call it once
    python benchmarks/_whatif_child.py pickle DIR                # torch.load every .bin shard
    python benchmarks/_whatif_child.py safetensors DIR           # safetensors' load_file every shard
    python benchmarks/_whatif_child.py import MODULE... [--cached FILE] [--packages FILE]  # import, ready()

``touch`` reads every tensor with ``safe_open``/``get_tensor`` (as transformers and vLLM do)
and, while the file is open, touches every page of it (one element per 4 KiB): whatever the
read did not bring in from storage is faulted in there, as the copy a real loader makes next
would, but without that copy's CPU work, which a busy 2-core machine stretches by 2x and more
and which the lever does not change: the storage is what prewarm removes. ``cast`` converts each tensor read to the serving dtype (``tensor.to(DTYPE)``, as
transformers and vLLM do per parameter; a no-op when the checkpoint is already in it).
``compile`` is a
first request's compilation (the Inductor cache is TORCHINDUCTOR_CACHE_DIR). ``pickle`` and
``safetensors`` load the same weights the two ways (``torch.load(weights_only=True)`` of the
``.bin`` shards, ``safetensors.torch.load_file`` of the ``.safetensors`` ones): every tensor
in memory, as a loader that builds its state dict first has it. ``import`` is a
server's imports alone (issue 38: the bytecode and prewarm-imports levers); ``--cached FILE``
writes there, one a line, the bytecode files of the modules imported before the import
(those of ``instrument()``), to build a bytecode cache that lacks only what it imports;
``--packages FILE`` writes the directories of the installed packages the import loaded (with
their vendored ``<name>.libs``), to evict exactly what it reads.

``otel_coldstart.instrument()`` is the first statement, so the root span starts at the
process start; the trace goes where OTEL_COLDSTART_OUTPUT_DIR says.
"""

import otel_coldstart

otel_coldstart.instrument(summary=False)

import os  # noqa: E402
import sys  # noqa: E402


def shards(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".safetensors"))


def touch(directory: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch  # noqa: F401  (safetensors' "pt" tensors)
        from safetensors import safe_open

    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                flat = tensor.reshape(-1)
                flat[:: max(1, 4096 // flat.element_size())].sum()  # one element per page
    otel_coldstart.ready()


def cast(directory: str, dtype: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch
        from safetensors import safe_open

    target, weights = getattr(torch, dtype), {}
    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                weights[key] = handle.get_tensor(key)
    weights = {key: tensor.to(target) for key, tensor in weights.items()}
    otel_coldstart.ready()


def compile_once() -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch

    def step(x):
        return (x * 2).sin() + 1

    torch.compile(step)(torch.randn(64))
    otel_coldstart.ready()


def load_pickles(directory: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch

    paths = sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".bin"))
    weights = {}
    for path in paths:
        weights.update(torch.load(path, map_location="cpu", weights_only=True))
    otel_coldstart.ready()


def load_safetensors(directory: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch  # noqa: F401  (safetensors' "pt" tensors)
        from safetensors.torch import load_file

    weights = {}
    for path in shards(directory):
        weights.update(load_file(path))
    otel_coldstart.ready()


def _option(args: list, name: str) -> tuple[list, str | None]:
    if name not in args:
        return args, None
    at = args.index(name)
    return args[:at] + args[at + 2:], args[at + 1]


def import_modules(args: list) -> None:
    args, packages = _option(args, "--packages")
    before = set(sys.modules)
    if "--cached" in args:
        at = args.index("--cached")
        with open(args[at + 1], "w", encoding="utf-8") as handle:
            for module in list(sys.modules.values()):
                cached = getattr(module, "__cached__", None)
                if isinstance(cached, str):
                    handle.write(cached + "\n")
        args = args[:at] + args[at + 2:]
    for name in args:
        __import__(name)
    if packages:
        found = set()
        for name in set(sys.modules) - before:
            top = sys.modules.get(name.partition(".")[0])
            paths = list(getattr(top, "__path__", None) or ())
            if paths and "-packages" in paths[0]:  # an installed package, not the standard library
                found.add(paths[0])
                if os.path.isdir(paths[0] + ".libs"):
                    found.add(paths[0] + ".libs")
        with open(packages, "w", encoding="utf-8") as handle:
            handle.writelines(path + "\n" for path in sorted(found))
    otel_coldstart.ready()


mode = sys.argv[1]
if mode == "touch":
    touch(sys.argv[2])
elif mode == "cast":
    cast(sys.argv[2], sys.argv[3])
elif mode == "compile":
    compile_once()
elif mode == "pickle":
    load_pickles(sys.argv[2])
elif mode == "safetensors":
    load_safetensors(sys.argv[2])
elif mode == "import":
    import_modules(sys.argv[2:])
else:
    raise SystemExit(f"unknown mode {mode!r}")
