"""Shared by analyze, compare and capacity: where traces come from (files, directories,
Jaeger, Tempo), how read errors map to exit codes, and output files that are never
overwritten."""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import sys
from dataclasses import dataclass
from typing import Iterator, TextIO

from ..analyze.breakdown import Breakdown, breakdowns
from ..analyze.live import DEFAULT_LIMIT, DEFAULT_TIMEOUT_S, LiveSourceError, jaeger_documents, tempo_documents
from ..analyze.readers import DEFAULT_MAX_BYTES, ReadResult, TraceReadError, read_documents, read_trace
from ._run_notes import explain_no_startup, untraced_warnings
from .errors import (EXIT_INPUT_TOO_LARGE, EXIT_INPUT_UNREADABLE, EXIT_NO_STARTUP, EXIT_NOT_A_TRACE,
                     EXIT_OUTPUT_FAILED, EXIT_SOURCE_UNAVAILABLE, EXIT_USAGE, EXIT_WOULD_OVERWRITE,
                     CliError)

_EXIT_FOR_KIND = {"unreadable": EXIT_INPUT_UNREADABLE, "too_large": EXIT_INPUT_TOO_LARGE,
                  "invalid": EXIT_NOT_A_TRACE}
TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".txt")  # what a directory stands for


@dataclass(frozen=True)
class Loaded:
    source: str
    result: ReadResult
    startups: list[Breakdown]

    def describe(self) -> dict:
        return {"source": self.source, "format": self.result.format, "spans": len(self.result.spans),
                "startups": len(self.startups), "warnings": list(self.result.warnings)}


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


def load_file(path: str, args: argparse.Namespace) -> Loaded:
    check_number(args.max_input_mb, "--max-input-mb", MAX_INPUT_MB_LIMIT)
    with _paused_gc():
        try:
            result = read_trace(path, int(args.max_input_mb * 2**20))
        except TraceReadError as exc:
            raise CliError(str(exc), _EXIT_FOR_KIND.get(exc.kind, EXIT_NOT_A_TRACE)) from None
        return Loaded(path, result, _select(breakdowns(result.spans), getattr(args, "trace_id", None)))


@contextlib.contextmanager
def _paused_gc() -> Iterator[None]:
    """Span records hold no reference cycles; the cyclic collector would only rescan the
    growing heap again and again while a million of them are built (40% of the time)."""
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


def load_live(args: argparse.Namespace) -> Loaded:
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
    return Loaded(source, result, _select(breakdowns(result.spans), args.trace_id))


def require_startups(loaded: list[Loaded], trace_id: str | None = None) -> list[Breakdown]:
    startups = [b for item in loaded for b in item.startups]
    if not startups:
        spans = sum(len(item.result.spans) for item in loaded)
        where = ", ".join(item.source for item in loaded[:3]) + (" ..." if len(loaded) > 3 else "")
        which = f" in trace {trace_id}" if trace_id else ""
        why = explain_no_startup(span for item in loaded for span in item.result.spans)
        if why and not trace_id:
            raise CliError(f"{where}: {why}", EXIT_NO_STARTUP)
        raise CliError(f"{where}: no model.startup span{which} among {spans} spans "
                       "(was the process instrumented with otel-coldstart?)", EXIT_NO_STARTUP)
    return startups


def warn(loaded: list[Loaded]) -> None:
    for item in loaded:
        for line in [*item.result.warnings, *untraced_warnings(item.result.spans)]:
            print(f"otel-coldstart: warning: {item.source}: {line}", file=sys.stderr)


@contextlib.contextmanager
def output(path: str | None) -> Iterator[TextIO]:
    """stdout, or a new file: an existing file is never overwritten."""
    if not path or path == "-":
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise CliError("cannot write the report: stdout is closed (use --output FILE)", EXIT_OUTPUT_FAILED)
        yield sys.stdout  # a closed pipe (`analyze ... | head`) and a full disk: see cli.main
        sys.stdout.flush()
        return
    try:
        handle = open(path, "x", encoding="utf-8")
    except FileExistsError:
        raise CliError(f"{path} exists; not overwriting it", EXIT_WOULD_OVERWRITE) from None
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}", EXIT_INPUT_UNREADABLE) from None
    with handle:
        yield handle
