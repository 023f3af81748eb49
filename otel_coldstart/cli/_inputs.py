"""Shared by analyze, compare and capacity: where traces come from (files, directories,
Jaeger, Tempo), how read errors map to exit codes, and output files that are never
overwritten."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import math
import multiprocessing
import os
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from .. import semconv
from ..analyze import assemble
from ..analyze.assemble import Assembler, TraceResult, analyse_trace
from ..analyze.breakdown import Breakdown, breakdowns
from ..analyze.integrity import Notes
from ..analyze.readers import (
    DEFAULT_MAX_BYTES,
    BatchReader,
    FileFacts,
    Part,
    TraceReadError,
    read_documents,
    reread,
    split_lines_file,
)
from ..analyze.storage_floor import StorageFloor, combine
from ..sources import DEFAULT_LIMIT, DEFAULT_TIMEOUT_S
from ._run_notes import explain_no_startup, untraced_warnings
from .errors import (
    EXIT_INPUT_TOO_LARGE,
    EXIT_INPUT_UNREADABLE,
    EXIT_NO_STARTUP,
    EXIT_NOT_A_TRACE,
    EXIT_OUTPUT_FAILED,
    EXIT_PARTIAL_INPUT,
    EXIT_SOURCE_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_WOULD_OVERWRITE,
    CliError,
)

_EXIT_FOR_KIND = {"unreadable": EXIT_INPUT_UNREADABLE, "too_large": EXIT_INPUT_TOO_LARGE,
                  "invalid": EXIT_NOT_A_TRACE}
TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".txt")  # what a directory stands for


@dataclass
class Inputs:
    """Everything read from the inputs of one command: the start-ups (parent links checked
    across all files together), one description per source, the storage floor if a floor
    document was given, and what had to be left out."""

    sources: list[dict]
    startups: list[Breakdown]
    floor: StorageFloor | None = None
    skipped: list[str] = field(default_factory=list)  # "file: why" / "file: line N: why"
    spans: int = 0
    first_error: CliError | None = None
    explanation: str | None = None  # why there is no start-up, when a launch span says (run)

    @property
    def partial(self) -> bool:
        return bool(self.skipped)

    def exit_code(self, code: int = 0) -> int:
        """``code`` (0, or 8 for a budget) unless inputs were left out: then 10, so CI
        notices a report made from less than it was given. A budget verdict wins."""
        return code or (EXIT_PARTIAL_INPUT if self.partial else 0)


def add_file_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-input-mb", type=float, default=DEFAULT_MAX_BYTES / 2**20, metavar="MB",
                        help="refuse a single JSON document larger than this (default %(default).0f MiB; "
                             "JSON Lines are streamed and only limited per line); with --jaeger/--tempo, "
                             "the most fetched in all")
    parser.add_argument("--trace-id", default=None, metavar="ID",
                        help="analyse only the trace with this id (a prefix is enough)")


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jaeger", metavar="URL", help="Jaeger query URL, e.g. http://jaeger:16686")
    parser.add_argument("--tempo", metavar="URL", help="Tempo HTTP URL, e.g. http://tempo:3200")
    parser.add_argument("--service", metavar="NAME", help="service to search (Jaeger: required without --trace-id)")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help="traces to fetch when searching (default %(default)s)")
    parser.add_argument("--lookback", default="24h", metavar="DURATION",
                        help="Jaeger search window (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="seconds each HTTP request may take in all, redirects included "
                             "(default %(default)g)")


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given; a directory stands for the trace files directly inside it."""
    expanded = []
    for path in paths:
        if os.path.isdir(path):
            inside = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(TRACE_SUFFIXES))
            if not inside:
                raise CliError(f"{path}: no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)}) in this directory",
                               EXIT_INPUT_UNREADABLE)
            expanded.extend(inside)
        elif not os.path.exists(path):
            raise CliError(f"{path}: no such file", EXIT_INPUT_UNREADABLE)
        else:
            expanded.append(path)
    return expanded


def _select(startups: list[Breakdown], trace_id: str | None) -> list[Breakdown]:
    wanted = _trace_filter(trace_id)
    return startups if wanted is None else [b for b in startups if wanted(b.trace_id)]


MAX_INPUT_MB_LIMIT = 1 << 20  # 1 TiB: beyond any trace; keeps the byte count an int
MAX_TIMEOUT_S = 24 * 3600  # a socket timeout must fit a C timeval; a day is more than enough


def check_number(value: float, option: str, upper: float) -> None:
    """A positive, finite number no larger than ``upper`` (NaN and Infinity parse as floats)."""
    if not math.isfinite(value) or value <= 0 or value > upper:
        raise CliError(f"{option} must be a positive number of at most {upper:.0f}, not {value!r}", EXIT_USAGE)


MAX_JOBS = 4  # processes reading inputs at once, at most (--jobs)
PARALLEL_FROM_BYTES = 16 << 20  # smaller inputs are read in this process: forking costs more


def add_jobs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help=f"processes that read the inputs at once (default: one per CPU, at most {MAX_JOBS}, "
                             "for inputs over 16 MiB; 1: all in this process)")


@dataclass
class _InputFacts:
    """What reading one input (or some of its parts) found."""

    facts: FileFacts = field(default_factory=FileFacts)
    spans: int = 0
    roots: set = field(default_factory=set)  # (trace id, span id) of the roots read
    launch_notes: list[str] = field(default_factory=list)
    explanation: str | None = None
    error: TraceReadError | None = None
    split: bool = False  # read in parts (split_lines_file): its own verdicts were left to the merge


_Read = list[tuple[int, str, _InputFacts]]  # each input read as traces: (index, path, what was found)


@dataclass
class _Outcome:
    results: dict[str, TraceResult]
    where: dict  # trace id -> where it was read (assemble.Where)
    inputs: dict[int, _InputFacts]


def _read_slices(paths: list[str], slices: list[tuple[int, Part | None]], max_bytes: int, trace_id: str | None,
                 slim: bool, show_progress: bool) -> _Outcome:
    """Read some inputs (or parts of them) and analyse their traces (analyze/assemble.py):
    in this process, or in one of the processes load_sides starts."""
    wanted = _trace_filter(trace_id)
    assembler = Assembler(lambda spans: analyse_trace(spans, slim),
                          lambda where, traces: [span for index, batches in where.items()
                                                 for span in reread(paths[index], batches, traces)],
                          assemble.CHUNK_SPANS)
    found: dict[int, _InputFacts] = {}
    with paused_gc():
        for index, part in slices:
            item = found.setdefault(index, _InputFacts(split=part is not None))
            reader = BatchReader(paths[index], max_bytes, part=part)
            reader.facts = item.facts
            try:
                with progress_reporter(paths[index]) if show_progress else contextlib.nullcontext() as report:
                    reader.progress = report
                    for batch in reader:
                        spans = batch.spans if wanted is None else [s for s in batch.spans if wanted(s.trace_id)]
                        item.spans += len(batch.spans)
                        item.roots.update((s.trace_id, s.span_id) for s in spans if s.is_root)
                        launches = _launch_spans(batch.spans)
                        if launches:
                            item.launch_notes += untraced_warnings(launches)
                            item.explanation = item.explanation or explain_no_startup(launches)
                        assembler.add(index, spans, batch.offset, batch.length)
            except TraceReadError as exc:
                item.error = item.error or exc
        results = assembler.finish(keep_where=True)
    return _Outcome(results, assembler.where, found)


def _jobs(sizes: list[int], args: argparse.Namespace, slim: bool) -> int:
    jobs = getattr(args, "jobs", None)
    if jobs is not None and not 1 <= jobs <= 64:
        raise CliError(f"--jobs must be between 1 and 64, not {jobs}", EXIT_USAGE)
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1  # Windows: the reading processes are forks of this one, with its state
    if jobs is not None:
        return jobs if slim else 1
    if not slim or sum(sizes) < PARALLEL_FROM_BYTES:
        return 1  # analyze keeps every start-up's spans: handing them between processes costs more
    return max(1, min(os.cpu_count() or 1, MAX_JOBS))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _plan(paths: list[str], sizes: list[int], jobs: int, max_bytes: int) -> list[list[tuple[int, Part | None]]]:
    """The inputs shared out between ``jobs`` processes, about equal bytes each: whole files,
    and a big JSON Lines file in parts (readers.split_lines_file)."""
    slices: list[tuple[int, int, Part | None]] = []  # (bytes, input, part)
    total = sum(sizes)
    for index, (path, size) in enumerate(zip(paths, sizes)):
        parts = split_lines_file(path, jobs, max_bytes) if jobs > 1 and size > total / jobs / 2 else None
        if parts and len(parts) > 1:
            slices += [(part.end - part.start, index, part) for part in parts]
        else:
            slices.append((size, index, None))
    groups: list[list[tuple[int, Part | None]]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for size, index, part in sorted(slices, key=lambda s: -s[0]):
        least = loads.index(min(loads))
        groups[least].append((index, part))
        loads[least] += size
    return [sorted(group, key=lambda s: (s[0], s[1].start if s[1] else 0)) for group in groups if group]


def load_files(paths: list[str], args: argparse.Namespace, *, keep_going: bool = True,
               slim: bool = False) -> Inputs:
    """Read every file; a file that cannot be read is left out with a warning naming it
    (and a bad JSON line is left out of its file) while the rest still make a report.

    The analysis is done trace by trace as the inputs are read (analyze/assemble.py), so a
    fleet's worth of start-ups never sits in memory as spans: duplicate ids, parent loops and
    missing parents are still checked across all the files, since a trace split over
    several (a torchrun rank's file points at the launcher's span in a sibling file) is put
    together before it is analysed. ``slim``: keep only what compare and capacity read; then
    big inputs are read by several processes at once (``--jobs``), each a share of the files
    (a big JSON Lines file in parts), and a trace that crosses their shares is put together
    and analysed again here."""
    return next(load_sides([paths], args, keep_going=keep_going, slim=slim))


def load_reference(args: argparse.Namespace) -> Inputs | None:
    """The ``--reference`` start-ups, which the findings and levers learn from, or None: every
    one of them (``--trace-id`` picks the start-ups reported, not the ones learnt from)."""
    if not getattr(args, "reference", None):
        return None
    return load_files(expand_paths(args.reference), argparse.Namespace(**{**vars(args), "trace_id": None}))


def load_sides(sides: list[list[str]], args: argparse.Namespace, *, keep_going: bool = True,
               slim: bool = False) -> Iterator[Inputs]:
    """load_files of each list of paths (compare's two sides), each side read on its own
    (a trace in both is one of each) and shared out as load_files would, but all sides read
    at once: the processes are started once, and what one side's share left a process to
    hand back is handed back while the others are still being read. The Inputs come one side
    at a time, so that a side's warnings and errors come before the next side's."""
    check_number(args.max_input_mb, "--max-input-mb", MAX_INPUT_MB_LIMIT)
    max_bytes = int(args.max_input_mb * 2**20)
    trace_id = getattr(args, "trace_id", None)
    plans: list[list[list[tuple[int, Part | None]]]] = []  # per side: its shares, the first one read in this process
    progress = []  # per side: read all in this process (--jobs 1, or a small input), with progress shown
    for paths in sides:
        sizes = [_size(p) for p in paths] if slim else []  # looked up once: 10,000 files are 10,000 stats
        jobs = _jobs(sizes, args, slim)
        plans.append([[(index, None) for index in range(len(paths))]] if jobs == 1 else
                     _plan(paths, sizes, jobs, max_bytes))
        progress.append(jobs == 1)

    def read_here(side: int) -> _Outcome:
        return _read_slices(sides[side], plans[side][0], max_bytes, trace_id, slim, progress[side])

    others = [(side, share) for side, plan in enumerate(plans) for share in plan[1:]]
    if not others:
        outcomes = [[read_here(side)] for side in range(len(sides))]
    else:
        # This process reads a share too, while forks of it read the others: one process
        # fewer to start, and one share's start-ups fewer pickled and read back once the
        # reading is done (a step nothing else runs beside: 0.15 s for 5,000 start-ups).
        with multiprocessing.get_context("fork").Pool(max(len(plan) for plan in plans) - 1) as pool:
            pending = pool.starmap_async(_read_slices, [(sides[side], share, max_bytes, trace_id, slim, False)
                                                        for side, share in others])
            outcomes = [[read_here(side)] for side in range(len(sides))]
            for (side, _), outcome in zip(others, pending.get()):
                outcomes[side].append(outcome)
    for paths, read in zip(sides, outcomes):
        yield _merge(paths, read, keep_going, slim)


def _merge(paths: list[str], outcomes: list[_Outcome], keep_going: bool, slim: bool) -> Inputs:
    """One Inputs from what each process read: per input, its facts; per trace, its result
    (a trace read by several processes analysed again here from all of its spans)."""
    inputs = Inputs([], [])
    per_input = _merge_facts(outcomes)
    results = _merge_results(paths, outcomes, slim)
    read = _traces_read(paths, per_input, inputs, keep_going)
    _describe_sources(read, *_collect_startups(paths, results, read, inputs), inputs)
    return inputs


def _merge_facts(outcomes: list[_Outcome]) -> dict[int, _InputFacts]:
    """Per input, what the processes that read a part of it found, as one."""
    per_input: dict[int, _InputFacts] = {}
    for outcome in outcomes:
        for index, item in outcome.inputs.items():
            merged = per_input.get(index)
            if merged is None:  # read by one process: every input but a big file read in parts
                per_input[index] = item
                continue
            merged.facts.formats |= item.facts.formats
            merged.facts.skipped += item.facts.skipped
            merged.facts.floor = merged.facts.floor or item.facts.floor
            merged.spans += item.spans
            merged.roots |= item.roots
            merged.launch_notes += item.launch_notes
            merged.explanation = merged.explanation or item.explanation
            merged.error = merged.error or item.error
    return per_input


def _merge_results(paths: list[str], outcomes: list[_Outcome], slim: bool) -> dict[str, TraceResult]:
    """Per trace, its result: a trace that crosses the processes' shares is read again from
    where each found a part of it, and analysed here whole."""
    results: dict[str, TraceResult] = {}
    crossing: dict[str, dict] = {}
    for outcome in outcomes:
        for trace_id, result in outcome.results.items():
            if trace_id in results:
                crossing.setdefault(trace_id, {})
            results[trace_id] = result
    for outcome in outcomes:
        for trace_id in crossing:
            for index, batches in outcome.where.get(trace_id, {}).items():
                crossing[trace_id].setdefault(index, []).extend(batches)
    for trace_id, where in crossing.items():
        spans = [s for index, batches in where.items() for s in reread(paths[index], batches, {trace_id})]
        result = analyse_trace(spans, slim)
        result.source = min(where)
        results[trace_id] = result
    return results


def _traces_read(paths: list[str], per_input: dict[int, _InputFacts], inputs: Inputs, keep_going: bool) -> _Read:
    """The inputs that are traces (the storage floors among them into ``inputs``): an input
    that could not be read is an error (with one input, or without ``keep_going``), or left
    out, said once."""
    read: _Read = []
    floors: list[StorageFloor] = []
    for index in sorted(per_input):
        item, path = per_input[index], paths[index]
        if item.facts.floor is not None and item.error is None:
            floors.append(item.facts.floor)
            inputs.sources.append({"source": path, "format": "floor", "spans": 0, "startups": 0, "warnings": []})
            continue
        error = _unreadable(path, item)
        if error is not None:
            if not keep_going or len(paths) == 1:
                raise error from None
            inputs.first_error = inputs.first_error or error
            inputs.skipped.append(str(error))
            if item.error is not None:
                print(f"otel-coldstart: warning: {item.error}; file skipped", file=sys.stderr)
            continue
        if item.split and item.facts.formats == {"otlp"}:
            item.facts.formats = {"otlp-lines"}
        for where in item.facts.skipped:
            inputs.skipped.append(f"{path}: {where}")
        read.append((index, path, item))
    if not read:
        if inputs.first_error is not None:
            raise inputs.first_error
        raise CliError("no trace among the inputs (only storage floor documents)", EXIT_NOT_A_TRACE)
    inputs.floor = combine(floors)
    return read


def _unreadable(path: str, item: _InputFacts) -> CliError | None:
    """Why an input cannot be read, or None."""
    if item.error is not None:
        return CliError(str(item.error), _EXIT_FOR_KIND.get(item.error.kind, EXIT_NOT_A_TRACE))
    if item.split and not item.spans and item.facts.skipped and not item.facts.formats:
        return CliError(f"{path}: {item.facts.skipped[0]}", EXIT_NOT_A_TRACE)  # no line of it read
    return None


def _collect_startups(paths: list[str], results: dict[str, TraceResult], read: _Read,
                      inputs: Inputs) -> tuple[dict[int, Notes], Notes]:
    """Every trace's start-ups into ``inputs``, in start order, and what its checks found:
    per input, the spans that cannot be true; for all together, what was repaired."""
    checks = {index: Notes() for index, *_ in read}
    repairs = Notes()
    startups: list[Breakdown] = []
    for result in results.values():
        if result.checks:  # most traces have nothing to note: no empty notes made to merge
            checks.setdefault(result.source, Notes()).merge(result.checks)
        if result.repairs:
            repairs.merge(result.repairs)
        startups.extend(result.startups)
        inputs.spans += result.spans
    startups.sort(key=lambda b: (b.root.start_ns, b.trace_id, b.root.span_id))
    if not inputs.spans and any(checks.values()):  # every span read is one that cannot be true
        first = next(note for notes in checks.values() for note in notes.lines())
        where = f"{paths[0]}: no span in it" if len(paths) == 1 else "no span in the inputs"
        raise CliError(f"{where} can be true ({first})", EXIT_NOT_A_TRACE)
    inputs.startups = startups
    if not startups:
        inputs.explanation = next((item.explanation for _, _, item in read if item.explanation), None)
    return checks, repairs


def _describe_sources(read: _Read, checks: dict[int, Notes], repairs: Notes, inputs: Inputs) -> None:
    """One description per trace input (format, spans, start-ups, warnings), each warning also
    said on stderr; what was left out or repaired counts as left out (exit 12)."""
    chosen = {(b.trace_id, b.root.span_id) for b in inputs.startups}
    for index, path, item in read:
        untrue = checks[index].lines()
        warnings = [f"{where} skipped" for where in item.facts.skipped] + untrue
        for line in [*warnings, *item.launch_notes]:
            print(f"otel-coldstart: warning: {path}: {line}", file=sys.stderr)
        inputs.skipped += [f"{path}: {line}" for line in untrue]  # left out or repaired: exit 12
        inputs.sources.append({"source": path, "format": item.facts.format, "spans": item.spans,
                               "startups": len(item.roots & chosen), "warnings": warnings})
    repaired = repairs.lines()
    where = read[0][1] if len(read) == 1 else f"{len(read)} files together"
    for line in repaired:
        print(f"otel-coldstart: warning: {where}: {line}", file=sys.stderr)
    if repaired:
        inputs.sources[-1]["warnings"] += repaired


def _launch_spans(spans: list) -> list:
    """The spans that say how a launch went (coldstart.launch.processes_started): looked up in
    each key layout's index, not span by span (model.Attributes)."""
    key = semconv.LAUNCH_PROCESSES_STARTED
    return [s for s in spans if key in getattr(s.attributes, "_index", s.attributes)]


def _trace_filter(trace_id: str | None):
    """--trace-id: a prefix of the trace id, leading zeros ignored; None keeps every trace."""
    if not trace_id:
        return None
    wanted = trace_id.lower().lstrip("0")
    return lambda found: found.lstrip("0").startswith(wanted)


PROGRESS_AFTER_S = 1.0  # a file read faster than this shows no progress


@contextlib.contextmanager
def progress_reporter(path: str) -> Iterator:
    """Progress on stderr for a file that takes more than ``PROGRESS_AFTER_S``, only on a
    terminal (a pipe or a CI log gets no carriage-return noise)."""
    if not _stderr_is_terminal():
        yield None
        return
    started = time.monotonic()
    shown = False

    def report(done: int, size: int) -> None:
        nonlocal shown
        if time.monotonic() - started < PROGRESS_AFTER_S:
            return
        percent = f"{done / size * 100:3.0f}% " if size else ""
        sys.stderr.write(f"\rotel-coldstart: reading {os.path.basename(path)}: {percent}"
                         f"({done / 2**20:.0f} of {size / 2**20:.0f} MiB)   ")
        sys.stderr.flush()
        shown = True

    try:
        yield report
    finally:
        if shown:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Span records hold no reference cycles; the cyclic collector would only rescan the
    growing heap again and again while a million of them are built (40% of the time), and
    again while the report is written. Held for the whole of analyze/compare/capacity."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def check_live_arguments(args: argparse.Namespace) -> None:
    """Combinations that are the caller's mistake: usage errors (exit 2), found before any
    request is sent."""
    if args.jaeger and not (args.service or args.trace_id):
        raise CliError("--jaeger needs --service NAME or --trace-id ID", EXIT_USAGE)


def load_live(args: argparse.Namespace) -> Inputs:
    from ..sources.live import LiveSourceError, jaeger_documents, tempo_documents  # HTTP: only when asked

    check_live_arguments(args)
    if args.limit <= 0:
        raise CliError("--limit must be positive", EXIT_USAGE)
    check_number(args.timeout, "--timeout", MAX_TIMEOUT_S)
    max_mb = getattr(args, "max_input_mb", DEFAULT_MAX_BYTES / 2**20)
    check_number(max_mb, "--max-input-mb", MAX_INPUT_MB_LIMIT)
    max_bytes = int(max_mb * 2**20)  # everything one command fetches, in all
    try:
        if args.jaeger:
            docs = jaeger_documents(args.jaeger, trace_id=args.trace_id, service=args.service,
                                    limit=args.limit, lookback=args.lookback, timeout=args.timeout,
                                    max_bytes=max_bytes)
            source = "jaeger"
        else:
            docs = tempo_documents(args.tempo, trace_id=args.trace_id, service=args.service,
                                   limit=args.limit, timeout=args.timeout, max_bytes=max_bytes)
            source = "tempo"
        result = read_documents(docs, source)
    except LiveSourceError as exc:
        raise CliError(str(exc), EXIT_INPUT_TOO_LARGE if exc.kind == "too_large" else EXIT_SOURCE_UNAVAILABLE) from None
    except TraceReadError as exc:
        raise CliError(str(exc), EXIT_NOT_A_TRACE) from None
    for line in [*result.warnings, *untraced_warnings(result.spans)]:
        print(f"otel-coldstart: warning: {source}: {line}", file=sys.stderr)
    startups = _select(breakdowns(result.spans), args.trace_id)
    return Inputs([{"source": source, "format": result.format, "spans": len(result.spans),
                    "startups": len(startups), "warnings": list(result.warnings)}], startups,
                  skipped=[f"{source}: {where}" for where in result.skipped],
                  spans=len(result.spans), explanation=None if startups else explain_no_startup(result.spans))


def require_startups(inputs: Inputs, trace_id: str | None = None) -> list[Breakdown]:
    if not inputs.startups:
        names = [s["source"] for s in inputs.sources]
        where = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        which = f" in trace {trace_id}" if trace_id else ""
        if inputs.explanation and not trace_id:
            raise CliError(f"{where}: {inputs.explanation}", EXIT_NO_STARTUP)
        raise CliError(f"{where}: no model.startup span{which} among {inputs.spans} spans "
                       "(was the process instrumented with otel-coldstart?)", EXIT_NO_STARTUP)
    return inputs.startups


@contextlib.contextmanager
def output(path: str | None, what: str = "--output") -> Iterator[TextIO]:
    """stdout, or a new file: an existing regular file is never overwritten. A device or a
    FIFO (``/dev/null``, ``/dev/stdout``, ``>(gzip > r.gz)``) is written to: nothing is
    replaced. Each way it can fail is one line naming ``what`` and the path."""
    if not path or path == "-" or _is_stdout(path):
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise CliError("cannot write the report: stdout is closed (use --output FILE)", EXIT_OUTPUT_FAILED)
        yield sys.stdout  # a closed pipe (`analyze ... | head`) and a full disk: see cli.main
        sys.stdout.flush()
        return
    handle = _open_output(path, what)
    with handle:
        yield handle


def write_report(command: str, report, args: argparse.Namespace) -> None:
    """``report`` in the ``--format`` asked (analyze/renderers.py), to ``--output`` or stdout."""
    from ..analyze.render_by import BY_RENDERERS
    from ..analyze.renderers import RENDERERS
    from ..analyze.report import ByReport

    with output(args.output) as out:
        (BY_RENDERERS if isinstance(report, ByReport) else RENDERERS[command])[args.format](report, out)


def _is_stdout(path: str) -> bool:
    """``-o /dev/stdout`` while stdout is redirected to a file: that file is stdout, not a file
    to refuse to overwrite."""
    try:
        return sys.stdout is not None and os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):  # no such path, or stdout is not a file descriptor
        return False


def _open_output(path: str, what: str) -> TextIO:
    try:
        kind = os.stat(path).st_mode
    except FileNotFoundError:
        kind = None
    except OSError as exc:
        raise _unwritable(path, what, exc) from None
    if kind is not None and stat.S_ISDIR(kind):
        raise CliError(f"{what} {path} is a directory; give a file name", EXIT_OUTPUT_FAILED)
    try:
        if kind is not None and (stat.S_ISCHR(kind) or stat.S_ISFIFO(kind)):
            # Not a file to overwrite. A FIFO nobody reads would block the open forever:
            # non-blocking, it fails at once (ENXIO) instead.
            fd = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(kind) else 0))
            if stat.S_ISFIFO(kind):
                os.set_blocking(fd, True)
            return open(fd, "w", encoding="utf-8")
        return open(path, "x", encoding="utf-8")
    except FileExistsError:
        raise CliError(f"{path} exists; not overwriting it", EXIT_WOULD_OVERWRITE) from None
    except OSError as exc:
        raise _unwritable(path, what, exc) from None


def _unwritable(path: str, what: str, exc: OSError) -> CliError:
    if exc.errno == errno.ENXIO:
        why = "a FIFO that no process is reading"
    elif exc.errno == errno.ENOENT:
        why = f"the directory {os.path.dirname(path) or '.'} does not exist"
    elif exc.errno == errno.ENOTDIR:
        why = "a part of the path is a file, not a directory"
    else:
        why = f"cannot write there ({exc.strerror or exc})"
    return CliError(f"{what} {path}: {why}", EXIT_OUTPUT_FAILED)
