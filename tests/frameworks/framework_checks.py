"""Checks every framework test makes on a trace, and the small real inputs they share."""

from __future__ import annotations

import glob
import json
import os
import socket
import struct
import subprocess
import sys

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")


def attrs(span) -> dict:
    """Attributes of an SDK ReadableSpan or an analyzer Span record alike."""
    return dict(span.attributes)


def span_id(span) -> str:
    if hasattr(span, "span_id"):
        return span.span_id
    return format(span.context.span_id, "016x")


def parent_id(span) -> str | None:
    if hasattr(span, "parent_id"):
        return span.parent_id
    return format(span.parent.span_id, "016x") if span.parent is not None else None


def assert_no_orphans(spans, allowed_roots: int = 1) -> None:
    """Every span's parent is in the trace; only ``allowed_roots`` spans have no parent."""
    ids = {span_id(s) for s in spans}
    orphans = [s.name for s in spans if parent_id(s) is not None and parent_id(s) not in ids]
    assert not orphans, f"spans whose parent is not in the trace: {orphans}"
    roots = [s.name for s in spans if parent_id(s) is None]
    assert len(roots) == allowed_roots, f"root spans: {roots}"


def by_phase(spans, phase: str) -> list:
    return [s for s in spans if attrs(s).get(semconv.PHASE) == phase]


def safetensors_header(path: str) -> dict:
    """The tensor table of a safetensors file, read from the file itself."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return header


def tensor_bytes(entry: dict) -> int:
    begin, end = entry["data_offsets"]
    return end - begin


def assert_same_weights(reference: dict, loaded: dict) -> None:
    """Bit-identical: same names, dtypes, shapes and bytes."""
    import torch

    assert reference.keys() == loaded.keys()
    for name, expected in reference.items():
        actual = loaded[name]
        assert actual.dtype == expected.dtype, name
        assert actual.shape == expected.shape, name
        assert torch.equal(actual.view(torch.uint8) if actual.dim() else actual,
                           expected.view(torch.uint8) if expected.dim() else expected), name


def hot_path_originals() -> dict:
    """The objects the per-tensor patches replace while a start-up runs."""
    import concurrent.futures

    import torch

    names = {f"Tensor.{n}": getattr(torch.Tensor, n) for n in ("to", "cuda", "half", "float", "bfloat16", "copy_")}
    names.update({f"Module.{n}": getattr(torch.nn.Module, n) for n in ("to", "cuda", "half", "float", "bfloat16")})
    names["ThreadPoolExecutor.submit"] = concurrent.futures.ThreadPoolExecutor.submit
    return names


def assert_hot_path_restored(originals: dict) -> None:
    """After ready() the framework serves on the very objects it had before instrument()."""
    current = hot_path_originals()
    changed = [name for name, obj in originals.items() if current[name] is not obj]
    assert not changed, f"still patched after ready(): {changed}"


def dtype_keyword(transformers_version: str) -> str:
    """from_pretrained's dtype argument: ``dtype=`` since transformers 4.56, ``torch_dtype=``
    before (4.51 is checked by hand, docs/frameworks.md)."""
    major_minor = tuple(int(part) for part in transformers_version.split(".")[:2])
    return "dtype" if major_minor >= (4, 56) else "torch_dtype"


def read_trace_dir(directory: str) -> list:
    spans = []
    for path in sorted(glob.glob(os.path.join(directory, "*.otlp.jsonl"))):
        spans.extend(read_trace_file(path))
    return spans


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**extra: str) -> dict:
    """The environment for a child process: no trace context or exporter settings inherited
    from whoever runs the tests, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k.lower() not in ("traceparent", "tracestate")
           and k not in ("PYTHONPATH", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra)
    return env


def run_python(args: list[str], env: dict, cwd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def stand_in_package(root, modules: dict) -> str:
    """A stand-in package tree under ``root`` (a pathlib.Path): ``modules`` maps a module file
    (``vllm/v1/engine/core.py``) to its source; every directory on the way gets an empty
    ``__init__.py``. Returns the directory to put on PYTHONPATH."""
    for relative, source in modules.items():
        parts = relative.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            package = root.joinpath(*parts[:depth])
            package.mkdir(parents=True, exist_ok=True)
            init = package / "__init__.py"
            if not init.exists():
                init.write_text("")
        root.joinpath(*relative.split("/")).write_text(source)
    return root
