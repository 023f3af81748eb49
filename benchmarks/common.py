"""What every benchmark here shares: the generated checkpoints, cache control, paired statistics
and the facts about the machine that a figure is meaningless without.

Every comparison is paired: the two sides run alternately in one run (A B, B A, ...) and the
figure is the median (and range) of the per-pair ratios, because this VM's speed drifts
within minutes (other tenants, and fresh memory charged unevenly: ~3 us per page for the
first 2-3 GiB a process touches, ~4x that after).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from otel_coldstart import demo, floor, probes

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)

# ~1 GiB of bf16 weights in 4 shards: a TinyLlama-width model cut to 8 layers (75 tensors).
FULL_SHAPE = demo.LlamaShape(vocab=32000, hidden=2048, intermediate=5632, layers=8, shards=4)
# 649 MB of bf16 in 4 shards, 75 tensors: the warm load + fp16 cast of issue 24 (~170 ms of
# load and cast on 2 cores: the per-tensor hooks are a visible share of it).
SHAPE_650MB = demo.LlamaShape(vocab=32000, hidden=1536, intermediate=4096, layers=8, shards=4)
SHAPES = {"1gib": FULL_SHAPE, "650mb": SHAPE_650MB}
# The smoke mode's checkpoint: a few MiB, same structure.
SMOKE_SHAPE = demo.LlamaShape(vocab=512, hidden=64, intermediate=128, layers=2, shards=4)


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "otel-coldstart", "bench")


def shape_label(shape: demo.LlamaShape) -> str:
    return f"v{shape.vocab}-h{shape.hidden}-i{shape.intermediate}-l{shape.layers}-s{shape.shards}"


@dataclass(frozen=True)
class Checkpoint:
    directory: str
    shards: list[str]  # safetensors shards, in order
    torch_bin: str  # the same tensors in one torch.save file
    tensors: int
    weight_bytes: int

    def files(self, fmt: str) -> list[str]:
        return list(self.shards) if fmt == "safetensors" else [self.torch_bin]

    def file_bytes(self, fmt: str) -> int:
        return sum(os.path.getsize(p) for p in self.files(fmt))


def prepare_checkpoint(shape: demo.LlamaShape, root: str | None = None) -> Checkpoint:
    """Generate (once, cached) ``shape`` as safetensors shards and as a torch ``.bin``."""
    import torch
    from safetensors.torch import load_file

    directory = os.path.join(root or cache_root(), shape_label(shape))
    shards = demo.generate_checkpoint(directory, shape)
    torch_bin = os.path.join(directory, "pytorch_model.bin")
    if not os.path.exists(torch_bin):
        state = {}
        for shard in shards:
            state.update(load_file(shard))
        tmp = torch_bin + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, torch_bin)
        del state
    tensors = shape.tensors()
    weight_bytes = 2 * sum(_numel(dims) for _, dims in tensors)  # bf16
    return Checkpoint(directory, shards, torch_bin, len(tensors), weight_bytes)


def _numel(dims: tuple[int, ...]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def set_cache(paths: list[str], state: str) -> float | None:
    """Make ``paths`` cold (evicted) or warm (read once). For cold, returns the share of pages
    still resident after eviction (None if the OS cannot tell), so a failed eviction shows."""
    if state == "warm":
        floor.read_files(paths)
        return None
    _accepted, resident = floor.evict(paths)
    return resident


def rotated(sides: list[str], round_number: int) -> list[str]:
    """Side order for one round: rotated each round so no side always runs first."""
    shift = round_number % len(sides)
    return sides[shift:] + sides[:shift]


def summary(values: list[float]) -> dict:
    """Median and range: the only figures quoted from a noisy machine."""
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def paired_ratios(rounds: list[dict], side: str, base: str, key) -> list[float]:
    """``key(side run) / key(base run)`` within each round that has both."""
    ratios = []
    for runs in rounds:
        if side in runs and base in runs:
            denominator = key(runs[base])
            if denominator:
                ratios.append(key(runs[side]) / denominator)
    return ratios


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    """The facts a reader needs to weigh the figures."""
    import opentelemetry.sdk.version
    import safetensors
    import torch
    import wrapt

    import otel_coldstart

    info = {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "opentelemetry_sdk": opentelemetry.sdk.version.__version__,
        "wrapt": wrapt.__version__,
        "otel_coldstart": otel_coldstart.__version__,
        "git_commit": _git_commit(),
        "filesystem": probes.filesystem_type(cache_root()) or "unknown",
    }
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", REPO_ROOT, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def add_checkpoint_options(parser, smoke_help: str) -> None:
    """The options every fresh-process benchmark on the 650 MB checkpoint shares."""
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--cache-root", default=None, help="where generated checkpoints are kept")
    parser.add_argument("--json", default=None, help="write the result (every run) here")


def checkpoint_for(args) -> tuple:
    """(shape, checkpoint) for those options: the tiny smoke checkpoint or the 650 MB one."""
    shape = SMOKE_SHAPE if args.smoke else SHAPE_650MB
    return shape, prepare_checkpoint(shape, args.cache_root)


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json(path: str, document: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, default=_json_default)
        handle.write("\n")


def measure_and_finish(benchmark: str, smoke: bool, measure, render, json_path: str | None, **facts) -> int:
    """The frame every benchmark's main() shares: the load average read before and after
    ``measure()`` (a callable returning the result), the result stamped with the benchmark's
    name, smoke or not, when it began, the machine and ``facts``, then printed and written
    (``finish``)."""
    load_before, began = load_average(), stamp()
    result = measure()
    result.update({"benchmark": benchmark, "smoke": smoke, "when": began, "machine": machine(),
                   "load_average": {"before": load_before, "after": load_average()}, **facts})
    return finish(result, render, json_path)


def finish(result: dict, render, json_path: str | None) -> int:
    """Print the benchmark's tables and the load average around it, and write its JSON."""
    render(result, sys.stdout)
    sys.stdout.write(f"\nload average before {result['load_average']['before']}, "
                     f"after {result['load_average']['after']}\n")
    if json_path:
        write_json(json_path, result)
    return 0


def _json_default(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def fmt_ratio(s: dict) -> str:
    if not s.get("n"):
        return "n/a"
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def fmt_seconds(s: dict) -> str:
    if not s.get("n"):
        return "n/a"
    return f"{s['median']:.3f} s ({s['min']:.3f}-{s['max']:.3f})"


def python() -> str:
    return sys.executable
