"""What-if projections checked against the start-ups they predict (issue 27).

For each lever, two sets of fresh-process start-ups run interleaved (A B, B A, ...): the
baseline, and the counterfactual the lever claims to predict. ``otel-coldstart whatif``
projects the baseline's traces; the projected total p50 is compared with the measured p50
of the counterfactual (both the root span, ``model.startup``, from process start to ready()).

| case | baseline (A) | counterfactual (B) | lever |
|---|---|---|---|
| prewarm | every checkpoint file evicted (fsync + POSIX_FADV_DONTNEED), every page touched while the file is open | every file resident | prewarm, with the storage floor of the same files (`otel-coldstart floor --json`) and resident start-ups that are not measured, one every other round (`--reference`: the loader's own rate for a resident file; the floor-only projection is recorded beside it) |
| serving-dtype | a bf16 checkpoint cast to fp16 | the same tensors saved as fp16 | serving-dtype |
| compile-cache | an empty Inductor cache (a new TORCHINDUCTOR_CACHE_DIR per run) | a warm one | compile-cache, learning the cost of a hit from warm start-ups that are not measured, one every other round (`--reference`) |
| to-safetensors | the checkpoint as pickles (`.bin`, torch.save), loaded with `torch.load`, resident | the same weights as safetensors, loaded with `load_file`, each tensor cloned out of the mapping (in memory, as torch.load leaves it), resident | to-safetensors, with the storage floor of the `.bin` files (the user's own files: no safetensors start-up to learn from) |
| bytecode | `import torch` with PYTHONPYCACHEPREFIX on a bytecode cache holding only what `instrument()` imported (PYTHONDONTWRITEBYTECODE=1: torch compiles from source every time) | the same with every module's bytecode cached | bytecode |
| prewarm-imports | `import torch, transformers.models.bert.modeling_bert` with the installed packages it loads evicted from the page cache (POSIX_FADV_DONTNEED on every file of their directories) | every file resident | prewarm-imports, with resident start-ups that are not measured, one every other round (`--reference`: the same imports' resident time) |

The start-ups are benchmarks/_whatif_child.py: ``touch`` (every tensor read, every page of it
touched while its file is open), ``cast`` (each tensor read converted to fp16, as loaders do
per parameter), and
``compile`` (one torch.compile'd function called once). Sizes are chosen so that the lever
moves the start-up by far more than this machine's noise: a projection that saved nothing
would miss by more than the tolerance.

    .venv/bin/python benchmarks/whatif_validation.py [--runs 5] [--case prewarm ...] [--json FILE]

prints one line per case (projected p50, measured p50, error) and a Markdown table for
RESULTS.md; ``--smoke`` runs tiny sizes once a side (checks the script, not the figures).
tests/whatif/test_whatif_validation.py runs the same cases with the 15% tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

from common import FULL_SHAPE, cache_root, load_average, shape_label, stamp  # noqa: E402
from otel_coldstart import demo, floor  # noqa: E402

CHILD = os.path.join(BENCH_DIR, "_whatif_child.py")
CASES = ("prewarm", "serving-dtype", "compile-cache", "to-safetensors", "bytecode", "prewarm-imports")
TOLERANCE = 0.15
# prewarm: 1.01 GiB (the benchmarks' checkpoint, shared with them): ~0.5-1 s of cold reads here.
PREWARM_SHAPE = FULL_SHAPE
# serving-dtype: 649 MB, whose bf16 -> fp16 cast on 2 cores (CPU casts run at ~0.3-1 GB/s)
# takes about half as long as the rest of the start-up on a quiet machine, and longer on a busy one.
DTYPE_SHAPE = demo.LlamaShape(vocab=32000, hidden=1536, intermediate=4096, layers=8, shards=4)
# to-safetensors: 2.3 GB, whose torch.load (~1.5 s resident on 2 busy cores) stands above the
# noise of a start-up that imports torch (2.5-4.7 s here with 8 engineers' work beside it; with
# 1.68 GB, 5 a side, that noise alone moved the p50 by more than the lever). At least
# PICKLE_MIN_RUNS a side: the safetensors start-up is almost all import, so its p50 is that noise's.
PICKLE_SHAPE = demo.LlamaShape(vocab=32000, hidden=2048, intermediate=5504, layers=20, shards=4)
PICKLE_MIN_RUNS = 9
SMOKE_SHAPE = demo.LlamaShape(vocab=512, hidden=64, intermediate=128, layers=2, shards=2)
CHILD_TIMEOUT_S = 600


@dataclass
class CaseResult:
    case: str
    lever: str
    runs: int
    baseline_p50_s: float | None = None
    projected_p50_s: float | None = None
    measured_p50_s: float | None = None
    baseline_s: list[float] = field(default_factory=list)  # every start-up's total, in run order
    projected_s: list[float] = field(default_factory=list)  # each baseline start-up projected alone
    measured_s: list[float] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    not_estimated: str | None = None
    floor_only_p50_s: float | None = None  # prewarm: projected with the storage floor alone
    skipped: str | None = None  # why the case could not run here
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def error(self) -> float | None:
        if self.projected_p50_s is None or not self.measured_p50_s:
            return None
        return self.projected_p50_s / self.measured_p50_s - 1

    @property
    def passed(self) -> bool:
        return self.error is not None and abs(self.error) <= TOLERANCE

    def line(self) -> str:
        if self.skipped:
            return f"{self.case}: skipped: {self.skipped}"
        if self.error is None:
            return f"{self.case}: not estimated: {self.not_estimated}"
        floor_only = (f" (with the floor alone: {self.floor_only_p50_s:.3f} s)"
                      if self.floor_only_p50_s is not None else "")
        return (f"{self.case}: baseline p50 {self.baseline_p50_s:.3f} s, projected p50 {self.projected_p50_s:.3f} s"
                f"{floor_only}, measured p50 {self.measured_p50_s:.3f} s: error {self.error * 100:+.1f}% "
                f"({'within' if self.passed else 'OUTSIDE'} {TOLERANCE:.0%})")


# --- checkpoints -----------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(directory: str):
    """One generator at a time per checkpoint (parallel test workers share the cache)."""
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    with open(directory + ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def checkpoint(shape: demo.LlamaShape, dtype: str = "bfloat16", root: str | None = None) -> list[str]:
    """The shards of ``shape`` in ``dtype``, generated once under the benchmarks' cache."""
    label = shape_label(shape) + ("" if dtype == "bfloat16" else f"-{dtype}")
    directory = os.path.join(root or cache_root(), label)
    with _locked(directory):
        return demo.generate_checkpoint(directory, shape, dtype=dtype)


# --- running start-ups -----------------------------------------------------------------------


def _env(output_dir: str, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_EXPORTER_OTLP", "OTEL_TRACES_EXPORTER"))}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = output_dir
    env.update(extra or {})
    return env


def start_up(args: list[str], output_dir: str, extra_env: dict | None = None) -> None:
    completed = subprocess.run([sys.executable, CHILD, *args], env=_env(output_dir, extra_env),
                               capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if completed.returncode != 0:
        raise RuntimeError(f"start-up {args} failed ({completed.returncode}): {completed.stderr[-2000:]}")


def cli(*args: str) -> dict:
    """``otel-coldstart ARGS --format json`` as a user runs it."""
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", *args, "--format", "json"],
                               capture_output=True, text=True, timeout=300)
    if completed.returncode not in (0, 12):
        raise RuntimeError(f"otel-coldstart {' '.join(args)}: exit {completed.returncode}: {completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def interleaved(runs: int, sides: dict, every_other_round=None) -> None:
    """``sides``: name -> callable running one start-up. A B, B A, A B, ...: both sides see
    the same drift of the machine; ``every_other_round`` (a reference start-up) after the
    first round's pair, the third's, ..."""
    names = list(sides)
    for number in range(runs):
        for name in (names if number % 2 == 0 else names[::-1]):
            sides[name]()
        if every_other_round is not None and number % 2 == 0:
            every_other_round()


def _startups(directory: str) -> list:
    from otel_coldstart.analyze.breakdown import breakdowns
    from otel_coldstart.analyze.readers import read_trace

    found = []
    for name in sorted(os.listdir(directory)):  # file names start with the start time
        found += breakdowns(read_trace(os.path.join(directory, name)).spans)
    return found


def _each_projected(lever: str, directory: str, floor_json: str | None, reference: str | None) -> list[float]:
    """Every baseline start-up projected on its own (the figures behind the p50, for the record)."""
    from otel_coldstart.analyze.storage_floor import floor_from_document
    from otel_coldstart.analyze.whatif import Options, project

    floor_doc = None
    if floor_json:
        with open(floor_json, encoding="utf-8") as handle:
            floor_doc = floor_from_document(json.load(handle), floor_json)
    options = Options(floor=floor_doc, reference=tuple(_startups(reference)) if reference else ())
    projected = []
    for b in _startups(directory):
        summary = project([b], [lever], options).levers[0].summary
        projected.append(summary.total.p50_ns / 1e9 if summary else float("nan"))
    return projected


def _project(result: CaseResult, baseline_dir: str, counterfactual_dir: str, *extra: str) -> CaseResult:
    projection = cli("whatif", baseline_dir, *extra, "--lever", result.lever)
    lever = projection["levers"][0]
    measured = cli("whatif", counterfactual_dir, "--lever", result.lever)
    result.baseline_p50_s = projection["baseline"]["p50_s"]
    result.projected_p50_s = lever["p50_s"]
    result.measured_p50_s = measured["baseline"]["p50_s"]
    result.assumptions = lever["assumptions"]
    result.not_estimated = lever["not_estimated"]
    result.baseline_s = [b.duration_ns / 1e9 for b in _startups(baseline_dir)]
    result.measured_s = [b.duration_ns / 1e9 for b in _startups(counterfactual_dir)]
    floor_json = next((x for x in extra if x.endswith(".json")), None)
    reference = extra[extra.index("--reference") + 1] if "--reference" in extra else None
    result.projected_s = _each_projected(result.lever, baseline_dir, floor_json, reference)
    return result


# --- the cases -------------------------------------------------------------------------------


def prewarm(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    result = CaseResult("prewarm", "prewarm", runs)
    paths = checkpoint(SMOKE_SHAPE if smoke else PREWARM_SHAPE, root=root)
    directory = os.path.dirname(paths[0])
    # The floor of the same files: the warm rate to read them at (no file is resident in an
    # all-evicted start-up to learn it from).
    floor_json = os.path.join(work, "floor.json")
    measured = floor.measure(paths, repeats=1 if smoke else 3)
    with open(floor_json, "w", encoding="utf-8") as handle:
        json.dump(measured.to_json(), handle)
    cold_dir, warm_dir = os.path.join(work, "evicted"), os.path.join(work, "resident")
    # This loader maps the files and touches their pages: read(2)'s warm rate knows nothing of
    # that. Resident start-ups that are not among the measured ones give the loader's own rate
    # for a resident file (--reference): one every other round, so that a busy moment does not
    # set the rate alone.
    reference_dir = os.path.join(work, "reference")

    def evicted() -> None:
        accepted, resident = floor.evict(paths)
        if not accepted or (resident is not None and resident > 0.05):
            raise RuntimeError(f"the OS kept the checkpoint in the page cache ({resident}): no cold start-up here")
        start_up(["touch", directory], cold_dir)

    def resident(output: str = warm_dir) -> None:
        floor.read_files(paths)
        start_up(["touch", directory], output)

    interleaved(runs, {"evicted": evicted, "resident": resident}, lambda: resident(reference_dir))
    floor_only = cli("whatif", cold_dir, floor_json, "--lever", "prewarm")["levers"][0]
    result.floor_only_p50_s = floor_only["p50_s"]
    return _project(result, cold_dir, warm_dir, floor_json, "--reference", reference_dir)


def serving_dtype(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    result = CaseResult("serving-dtype", "serving-dtype", runs)
    shape = SMOKE_SHAPE if smoke else DTYPE_SHAPE
    bf16, fp16 = checkpoint(shape, "bfloat16", root), checkpoint(shape, "float16", root)
    cast_dir, native_dir = os.path.join(work, "bf16-cast"), os.path.join(work, "fp16")

    def casting() -> None:
        floor.read_files(bf16)  # both resident: only the dtype differs
        start_up(["cast", os.path.dirname(bf16[0]), "float16"], cast_dir)

    def native() -> None:
        floor.read_files(fp16)
        start_up(["cast", os.path.dirname(fp16[0]), "float16"], native_dir)

    interleaved(runs, {"bf16 cast to fp16": casting, "fp16": native})
    return _project(result, cast_dir, native_dir)


def compile_cache(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    result = CaseResult("compile-cache", "compile-cache", runs)
    if not runtime_records_compile_provenance():
        result.skipped = ("the runtime does not record compile cache provenance yet (coldstart.compile.cache.*, "
                          "issue 26): this case runs once it does")
        return result
    warm_cache = os.path.join(work, "inductor-warm")
    empty_dir, warm_dir, reference_dir = (os.path.join(work, n) for n in ("empty-cache", "warm-cache", "reference"))
    # Prime the warm cache; the cost of a hit is learned from warm start-ups that are not
    # measured (--reference), one every other round.
    priming = os.path.join(work, "priming")
    start_up(["compile"], priming, {"TORCHINDUCTOR_CACHE_DIR": warm_cache})
    missing = _provenance_missing(priming)
    if missing:
        result.skipped = missing
        return result
    counter = iter(range(runs))

    def empty() -> None:
        cache = os.path.join(work, f"inductor-empty-{next(counter)}")
        shutil.rmtree(cache, ignore_errors=True)
        start_up(["compile"], empty_dir, {"TORCHINDUCTOR_CACHE_DIR": cache})

    def warm(output: str = warm_dir) -> None:
        start_up(["compile"], output, {"TORCHINDUCTOR_CACHE_DIR": warm_cache})

    interleaved(runs, {"empty cache": empty, "warm cache": warm}, lambda: warm(reference_dir))
    return _project(result, empty_dir, warm_dir, "--reference", reference_dir)


def runtime_records_compile_provenance() -> bool:
    """Whether this build's compile patch writes the cache provenance at all (a compilation
    costs tens of seconds cold: not spent to find out)."""
    import inspect

    from otel_coldstart.patches import compile as compile_patch

    return "COMPILE_CACHE_HITS" in inspect.getsource(compile_patch)


def _provenance_missing(directory: str) -> str | None:
    from otel_coldstart import semconv
    from otel_coldstart.analyze.readers import read_trace

    compiles = []
    for name in os.listdir(directory):
        compiles += [s for s in read_trace(os.path.join(directory, name)).spans
                     if s.attributes.get(semconv.PHASE) == semconv.PHASE_COMPILE]
    if not compiles:
        return "the start-up recorded no compilation"
    if not any(semconv.COMPILE_CACHE_HITS in s.attributes for s in compiles):
        return (f"the runtime does not record compile cache provenance ({semconv.COMPILE_CACHE_HITS}, "
                "issue 26) in this build")
    return None


def pickled(paths: list[str]) -> list[str]:
    """The same tensors as ``paths`` saved with torch.save, one ``.bin`` per shard, once."""
    import torch
    from safetensors.torch import load_file

    directory = os.path.dirname(paths[0]) + "-pickle"
    with _locked(directory):
        os.makedirs(directory, exist_ok=True)
        out = []
        for path in paths:
            target = os.path.join(directory, os.path.basename(path).replace(".safetensors", ".bin"))
            if not os.path.exists(target):
                torch.save(load_file(path), target + ".part")
                os.replace(target + ".part", target)
            out.append(target)
        return out


def to_safetensors(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    runs = runs if smoke else max(runs, PICKLE_MIN_RUNS)
    result = CaseResult("to-safetensors", "to-safetensors", runs)
    safe = checkpoint(SMOKE_SHAPE if smoke else PICKLE_SHAPE, "bfloat16", root)
    bins = pickled(safe)
    # The floor of the user's own files: no safetensors file in their start-ups to learn from.
    floor_json = os.path.join(work, "floor.json")
    measured = floor.measure(bins, repeats=1 if smoke else 3)
    with open(floor_json, "w", encoding="utf-8") as handle:
        json.dump(measured.to_json(), handle)
    pickle_dir, safe_dir = os.path.join(work, "pickle"), os.path.join(work, "safetensors")

    def pickle_load() -> None:
        floor.read_files(bins)  # both resident: only the format differs
        start_up(["pickle", os.path.dirname(bins[0])], pickle_dir)

    def safetensors_load() -> None:
        floor.read_files(safe)
        start_up(["safetensors", os.path.dirname(safe[0])], safe_dir)

    interleaved(runs, {"torch.load of .bin": pickle_load, "load_file of .safetensors": safetensors_load})
    return _project(result, pickle_dir, safe_dir, floor_json)


def bytecode(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    """Issue 38: `import torch` without cached bytecode against with it. PYTHONPYCACHEPREFIX
    points both sides at a bytecode cache: every module's (filled by a first start-up), or only
    the modules imported before the import (instrument()'s): the interpreter start-up and the
    plugin's own import read their bytecode alike on both sides, torch compiles on one."""
    result = CaseResult("bytecode", "bytecode", runs)
    modules = SMOKE_IMPORTS if smoke else IMPORTS
    full, minimal = bytecode_caches(work, modules)
    no_bytecode_dir, cached_dir = os.path.join(work, "no-bytecode"), os.path.join(work, "cached")

    def no_bytecode() -> None:  # PYTHONDONTWRITEBYTECODE=1: the cache stays without torch's
        start_up(["import", *modules], no_bytecode_dir, {"PYTHONPYCACHEPREFIX": minimal, "PYTHONDONTWRITEBYTECODE": "1"})

    def cached() -> None:
        start_up(["import", *modules], cached_dir, {"PYTHONPYCACHEPREFIX": full, "PYTHONDONTWRITEBYTECODE": "1"})

    interleaved(runs, {"no bytecode": no_bytecode, "bytecode cached": cached})
    return _project(result, no_bytecode_dir, cached_dir)


def bytecode_caches(work: str, modules) -> tuple[str, str]:
    """Two bytecode caches for PYTHONPYCACHEPREFIX: every module's that importing ``modules``
    after instrument() needs, and only those of the modules imported before (instrument()'s)."""
    full, minimal = os.path.join(work, "pycache-full"), os.path.join(work, "pycache-instrument-only")
    listed = os.path.join(work, "cached.txt")
    writing = {"PYTHONPYCACHEPREFIX": full, "PYTHONDONTWRITEBYTECODE": ""}
    start_up(["import", *modules], os.path.join(work, "priming"), writing)  # writes every module's bytecode
    start_up(["import", "--cached", listed], os.path.join(work, "priming"), {"PYTHONPYCACHEPREFIX": full})
    with open(listed, encoding="utf-8") as handle:
        for path in handle.read().split():
            if path.startswith(full + os.sep) and os.path.exists(path):
                os.makedirs(os.path.dirname(minimal + path[len(full):]), exist_ok=True)
                shutil.copy2(path, minimal + path[len(full):])
    return full, minimal


def package_files(module: str) -> list[str]:
    """Every file of an installed package's directory, found without importing it (a process that
    imported torch maps its libraries, and mapped pages cannot be evicted)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{module} is not an installed package")
    return files_under([list(spec.submodule_search_locations)[0]])


def files_under(directories) -> list[str]:
    found = []
    for top in directories:
        for directory, _, names in os.walk(top):
            found += [os.path.join(directory, n) for n in names if os.path.isfile(os.path.join(directory, n))]
    return sorted(found)


def prewarm_imports(work: str, runs: int, smoke: bool = False, root: str | None = None) -> CaseResult:
    """Issue 38: a server's imports (torch and a transformers model) with the installed packages
    they load evicted from the page cache against resident. Only those packages: what the
    interpreter and instrument() read before stays resident on both sides."""
    result = CaseResult("prewarm-imports", "prewarm-imports", runs)
    modules = SMOKE_IMPORTS if smoke else STORAGE_IMPORTS
    evicted_dir, resident_dir = os.path.join(work, "evicted"), os.path.join(work, "resident")
    ordinary = {"PYTHONDONTWRITEBYTECODE": ""}  # the bytecode in __pycache__, as installed
    listed = os.path.join(work, "packages.txt")
    start_up(["import", *modules, "--packages", listed], os.path.join(work, "priming"), ordinary)
    with open(listed, encoding="utf-8") as handle:
        files = files_under(handle.read().split())

    def evicted() -> None:
        accepted, resident = floor.evict(files)
        if not accepted or (resident is not None and resident > 0.05):
            raise RuntimeError(f"the OS kept {modules} in the page cache ({resident}): no cold start-up here")
        start_up(["import", *modules], evicted_dir, ordinary)

    def resident(directory: str = resident_dir) -> None:
        floor.read_files(files)
        start_up(["import", *modules], directory, ordinary)

    # The same imports resident, as a warm node's trace (--reference): start-ups that are not
    # measured, one every other round, so that a busy moment does not set the twin alone.
    reference_dir = os.path.join(work, "reference")
    interleaved(runs, {"evicted": evicted, "resident": resident}, lambda: resident(reference_dir))
    return _project(result, evicted_dir, resident_dir, "--reference", reference_dir)


IMPORTS = ("torch",)
# Reading torch's libraries alone is a few tenths of a second on this VM's disk, within the
# noise of a busy machine; a model's transformers code adds hundreds of small files.
STORAGE_IMPORTS = ("torch", "transformers.models.bert.modeling_bert")
SMOKE_IMPORTS = ("safetensors",)  # small: the script's path, not its figures

RUNNERS = {"prewarm": prewarm, "serving-dtype": serving_dtype, "compile-cache": compile_cache,
           "to-safetensors": to_safetensors, "bytecode": bytecode, "prewarm-imports": prewarm_imports}


def run_case(case: str, runs: int = 5, work: str | None = None, smoke: bool = False,
             root: str | None = None) -> CaseResult:
    owned = work is None
    work = work or tempfile.mkdtemp(prefix=f"whatif-{case}-")
    began, load = time.monotonic(), load_average()
    try:
        result = RUNNERS[case](work, runs, smoke, root)
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)
    result.load_before, result.load_after = load, load_average()
    result.wall_s = time.monotonic() - began
    return result


def markdown(results: list[CaseResult]) -> str:
    lines = ["| case | runs a side | baseline p50 | projected p50 | measured p50 | error | within 15% | "
             "load avg before -> after |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        if r.skipped or r.error is None:
            lines.append(f"| {r.case} | {r.runs} | - | - | - | - | {r.skipped or r.not_estimated} | |")
            continue
        lines.append(f"| {r.case} | {r.runs} | {r.baseline_p50_s:.3f} s | {r.projected_p50_s:.3f} s | "
                     f"{r.measured_p50_s:.3f} s | {r.error * 100:+.1f}% | {'yes' if r.passed else 'no'} | "
                     f"{r.load_before} -> {r.load_after} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="start-ups a side (default %(default)s)")
    parser.add_argument("--case", action="append", choices=CASES, help="a case to run (default: all)")
    parser.add_argument("--smoke", action="store_true", help="tiny checkpoints, one run a side")
    parser.add_argument("--cache-root", default=None, help="where checkpoints are generated (default: the "
                                                            "benchmarks' cache)")
    parser.add_argument("--json", metavar="FILE", help="write every run's figures here")
    args = parser.parse_args(argv)
    runs = 1 if args.smoke else args.runs
    results = []
    for case in args.case or CASES:
        result = run_case(case, runs, smoke=args.smoke, root=args.cache_root)
        print(result.line(), flush=True)
        results.append(result)
    print()
    print(markdown(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"stamp": stamp(), "tolerance": TOLERANCE,
                       "results": [dict(asdict(r), error=r.error) for r in results]}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
