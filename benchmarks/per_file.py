"""Per-file cost of the checkpoint-file hooks: the time a traced start-up adds per file read,
over and above the per-tensor hooks.

    python benchmarks/per_file.py [--rounds N] [--smoke] [--cache warm|cold] [--json OUT]

One process, warm files by default. Each round runs, in rotated order:
- ``plain``: not instrumented, every file read (``safe_open`` + ``get_tensor`` of every
  tensor, ``load_file``, or ``torch.load`` of the same tensors saved with ``torch.save``);
- ``traced``: ``instrument()`` (SDK provider, in-memory exporter, no summary), the same
  reads, then ``ready()`` (where the storage figures of files still being read are settled);
- ``empty``: ``instrument()`` then ``ready()`` with no read, for the fixed cost of ``ready()``.
Each side runs 3 times per round and its best time is kept. Per file:
``(traced - empty - plain) / files``, the median and range over rounds. The files
have few, large tensors (16 per file), so the per-tensor hooks (~7-12 us each) add ~0.2 ms
per file of the figure; what the figure is about is the per-file work: the file's span, path
discovery, page-cache residency, shard position.

With ``--cache cold`` every side's files are evicted (posix_fadvise DONTNEED) before it
runs; a cold read takes milliseconds per MiB here, so that figure is much noisier.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import common

# (label, files, MiB per file): the 4-shard ~650 MB warm load had ~160 MiB shards.
SIZES = [("4 x 32 MiB", 4, 32), ("4 x 160 MiB", 4, 160)]
SMOKE_SIZES = [("2 x 1 MiB", 2, 1)]
# torch.load without mmap allocates the whole file anew each time, and this VM charges fresh
# memory so unevenly (the plain side alone: 82-444 ms for the same 128 MiB) that the
# difference measures the allocator, not the hooks; torch.load(mmap=True) goes through the
# same file hooks without that allocation. ``--apis torch_load`` still runs it.
APIS = ("safe_open", "load_file", "torch_load_mmap")
TENSORS_PER_FILE = 16
BEST_OF = 3


def prepare_files(root: str, files: int, mib: int) -> dict[str, list[str]]:
    """``files`` safetensors files of ``mib`` MiB of bf16 each, and the same as torch.save files."""
    import torch
    from safetensors.torch import save_file

    directory = os.path.join(root, f"per-file-{files}x{mib}")
    os.makedirs(directory, exist_ok=True)
    shards, bins = [], []
    elements = mib * (1 << 20) // 2 // TENSORS_PER_FILE
    generator = torch.Generator().manual_seed(0)
    for number in range(files):
        st = os.path.join(directory, f"model-{number + 1:05d}-of-{files:05d}.safetensors")
        pt = os.path.join(directory, f"part-{number + 1:05d}.bin")
        if not (os.path.exists(st) and os.path.exists(pt)):
            state = {f"layer{number}.w{i}": torch.randn(elements, generator=generator).to(torch.bfloat16)
                     for i in range(TENSORS_PER_FILE)}
            save_file(state, st + ".tmp")
            os.replace(st + ".tmp", st)
            torch.save(state, pt + ".tmp")
            os.replace(pt + ".tmp", pt)
        shards.append(st)
        bins.append(pt)
    return {"safetensors": shards, "bin": bins}


def read_all(api: str, paths: list[str]) -> int:
    import torch

    total = 0
    for path in paths:
        if api == "safe_open":
            from safetensors import safe_open

            with safe_open(path, framework="pt") as handle:
                for name in handle.keys():
                    total += handle.get_tensor(name).nbytes
        elif api == "load_file":
            from safetensors.torch import load_file

            total += sum(t.nbytes for t in load_file(path).values())
        else:
            loaded = torch.load(path, weights_only=True, mmap=api == "torch_load_mmap")
            total += sum(t.nbytes for t in loaded.values())
    return total


def _instrument():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_coldstart

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_coldstart.instrument(tracer_provider=provider, start_at="instrument", summary=False, handle_sigterm=False)
    return exporter


def run_side(side: str, api: str, paths: list[str], cache: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one side. CPU time is what the hooks
    add on a machine whose other tenants stretch wall time (load average 6 on 2 cores here);
    it misses only time the hooks would spend waiting (they read nothing from storage)."""
    import otel_coldstart

    if cache == "cold":
        common.set_cache(paths, "cold")
    if side == "plain":
        began, cpu = time.perf_counter(), time.process_time()
        read_all(api, paths)
        return time.perf_counter() - began, time.process_time() - cpu
    exporter = _instrument()
    began, cpu = time.perf_counter(), time.process_time()
    if side == "traced":
        read_all(api, paths)
    otel_coldstart.ready()
    elapsed = time.perf_counter() - began, time.process_time() - cpu
    if side == "traced":
        shards = [s for s in exporter.get_finished_spans() if s.attributes.get("coldstart.phase") == "deserialize"]
        if len(shards) != len(paths):
            raise RuntimeError(f"{api}: {len(shards)} file spans for {len(paths)} files")
    otel_coldstart.uninstrument()
    return elapsed


def measure(rounds: int, sizes, cache: str, root: str, log=sys.stderr, apis=APIS) -> dict:
    import torch

    torch.set_num_threads(1)
    results = []
    for label, files, mib in sizes:
        prepared = prepare_files(root, files, mib)
        for api in apis:
            paths = prepared["bin" if api.startswith("torch_load") else "safetensors"]
            common.set_cache(paths, "warm")
            run_side("traced", api, paths, "warm")  # first use: imports, lazy set-up
            run_side("plain", api, paths, "warm")
            per_file_ms, per_file_cpu_ms = [], []
            for number in range(rounds):
                # Best of BEST_OF per side and round: the least disturbed by other tenants.
                runs = {side: [run_side(side, api, paths, cache) for _ in range(BEST_OF)]
                        for side in common.rotated(["plain", "traced", "empty"], number)}
                wall = {side: min(w for w, _ in r) for side, r in runs.items()}
                cpu = {side: min(c for _, c in r) for side, r in runs.items()}
                per_file_ms.append((wall["traced"] - wall["empty"] - wall["plain"]) / files * 1e3)
                per_file_cpu_ms.append((cpu["traced"] - cpu["empty"] - cpu["plain"]) / files * 1e3)
            result = {"size": label, "files": files, "mib_per_file": mib, "api": api, "cache": cache,
                      "per_file_ms": common.summary(per_file_ms), "samples_ms": per_file_ms,
                      "per_file_cpu_ms": common.summary(per_file_cpu_ms), "samples_cpu_ms": per_file_cpu_ms}
            results.append(result)
            if log:
                s, c = result["per_file_ms"], result["per_file_cpu_ms"]
                print(f"  {label} {api} {cache}: {s['median']:.3f} ms per file ({s['min']:.3f} to {s['max']:.3f}); "
                      f"CPU {c['median']:.3f} ms ({c['min']:.3f} to {c['max']:.3f})", file=log, flush=True)
    return {"rounds": rounds, "cases": results, "tensors_per_file": TENSORS_PER_FILE}


def render(result: dict, out) -> None:
    out.write(f"{result['rounds']} rounds per case, {result['tensors_per_file']} tensors per file, "
              f"torch.set_num_threads(1)\n\n")
    out.write("| files | api | cache | wall added per file, median (min to max) | CPU added per file |\n"
              "|---|---|---|---|---|\n")
    for case in result["cases"]:
        s, c = case["per_file_ms"], case["per_file_cpu_ms"]
        out.write(f"| {case['size']} | {case['api']} | {case['cache']} | "
                  f"{s['median']:.3f} ms ({s['min']:.3f} to {s['max']:.3f}) | "
                  f"{c['median']:.3f} ms ({c['min']:.3f} to {c['max']:.3f}) |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cache", choices=["warm", "cold"], default="warm")
    parser.add_argument("--smoke", action="store_true", help="tiny files, 2 rounds: checks it runs, not speed")
    parser.add_argument("--cache-root", default=None, help="where the generated files are kept")
    parser.add_argument("--apis", nargs="*", default=list(APIS),
                        choices=["safe_open", "load_file", "torch_load", "torch_load_mmap"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rounds, sizes = (2, SMOKE_SIZES) if args.smoke else (args.rounds, SIZES)
    return common.measure_and_finish(
        "per_file", args.smoke, lambda: measure(rounds, sizes, args.cache, args.cache_root or common.cache_root(), apis=args.apis),
        render, args.json)


if __name__ == "__main__":
    sys.exit(main())
