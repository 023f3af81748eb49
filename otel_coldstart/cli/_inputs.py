"""Shared by analyze, compare and capacity: where traces come from (files, directories,
Jaeger, Tempo), how read errors map to exit codes, and output files that are never
overwritten."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import math
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator, TextIO

from ..analyze.breakdown import Breakdown, breakdowns
from ..analyze.integrity import repair
from ..analyze.interrupted import complete_killed
from ..analyze.storage_floor import StorageFloor, combine
from ..analyze.readers import DEFAULT_MAX_BYTES, ReadResult, TraceReadError, read_documents, read_trace
from ..sources import DEFAULT_LIMIT, DEFAULT_TIMEOUT_S
from ._run_notes import explain_no_startup, untraced_warnings
from .errors import (EXIT_INPUT_TOO_LARGE, EXIT_INPUT_UNREADABLE, EXIT_NO_STARTUP, EXIT_NOT_A_TRACE,
                     EXIT_OUTPUT_FAILED, EXIT_PARTIAL_INPUT, EXIT_SOURCE_UNAVAILABLE, EXIT_USAGE, EXIT_WOULD_OVERWRITE,
                     CliError)

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
    if not trace_id:
        return startups
    wanted = trace_id.lower().lstrip("0")
    return [b for b in startups if b.trace_id.lstrip("0").startswith(wanted)]


MAX_INPUT_MB_LIMIT = 1 << 20  # 1 TiB: beyond any trace; keeps the byte count an int
MAX_TIMEOUT_S = 24 * 3600  # a socket timeout must fit a C timeval; a day is more than enough


def check_number(value: float, option: str, upper: float) -> None:
    """A positive, finite number no larger than ``upper`` (NaN and Infinity parse as floats)."""
    if not math.isfinite(value) or value <= 0 or value > upper:
        raise CliError(f"{option} must be a positive number of at most {upper:.0f}, not {value!r}", EXIT_USAGE)


def load_files(paths: list[str], args: argparse.Namespace, *, keep_going: bool = True) -> Inputs:
    """Read every file; a file that cannot be read is left out with a warning naming it
    (and a bad JSON line is left out of its file) while the rest still make a report.
    Duplicate ids, parent loops and missing parents are checked across all files at once:
    a torchrun rank's file points at the launcher's span in a sibling file."""
    check_number(args.max_input_mb, "--max-input-mb", MAX_INPUT_MB_LIMIT)
    max_bytes = int(args.max_input_mb * 2**20)
    results: list[tuple[str, ReadResult]] = []
    floors: list[StorageFloor] = []
    inputs = Inputs([], [])
    with paused_gc():
        for path in paths:
            try:
                with progress_reporter(path) as report:
                    result = read_trace(path, max_bytes, progress=report, repair_links=False)
            except TraceReadError as exc:
                error = CliError(str(exc), _EXIT_FOR_KIND.get(exc.kind, EXIT_NOT_A_TRACE))
                if not keep_going or len(paths) == 1:
                    raise error from None
                inputs.first_error = inputs.first_error or error
                inputs.skipped.append(str(exc))
                print(f"otel-coldstart: warning: {exc}; file skipped", file=sys.stderr)
                continue
            if result.floor is not None:
                floors.append(result.floor)
                inputs.sources.append({"source": path, "format": "floor", "spans": 0, "startups": 0,
                                       "warnings": []})
                continue
            for where in result.skipped:
                inputs.skipped.append(f"{path}: {where}")
            results.append((path, result))
        if not results:
            if inputs.first_error is not None:
                raise inputs.first_error
            raise CliError("no trace among the inputs (only storage floor documents)", EXIT_NOT_A_TRACE)
        spans = [span for _, result in results for span in result.spans]
        spans, repairs = repair(complete_killed(spans))  # killed start-ups rebuilt across all files
        startups = _select(breakdowns(spans), getattr(args, "trace_id", None))
    for path, result in results:
        for line in [*result.warnings, *untraced_warnings(result.spans)]:
            print(f"otel-coldstart: warning: {path}: {line}", file=sys.stderr)
    if not startups:
        inputs.explanation = explain_no_startup(spans)
    for line in repairs:
        where = results[0][0] if len(results) == 1 else f"{len(results)} files together"
        print(f"otel-coldstart: warning: {where}: {line}", file=sys.stderr)
    chosen = {(b.trace_id, b.root.span_id) for b in startups}
    inputs.sources += [{"source": path, "format": result.format, "spans": len(result.spans),
                        "startups": sum(1 for s in result.spans if s.is_root and (s.trace_id, s.span_id) in chosen),
                        "warnings": list(result.warnings)} for path, result in results]
    if repairs:
        inputs.sources[-1]["warnings"] += repairs
    inputs.startups = startups
    inputs.spans = len(spans)
    inputs.floor = combine(floors)
    return inputs


@contextlib.contextmanager
def progress_reporter(path: str) -> Iterator:
    """Progress on stderr for a file that takes more than a second, only on a terminal
    (a pipe or a CI log gets no carriage-return noise)."""
    if not _stderr_is_terminal():
        yield None
        return
    started = time.monotonic()
    shown = False

    def report(done: int, size: int) -> None:
        nonlocal shown
        if time.monotonic() - started < 1.0:
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
