"""``otel-coldstart whatif PATHS...``: the baseline p50/p95 start-up and, per lever, the
projected p50/p95 with the saving and the assumptions in words (analyze/whatif/)."""

from __future__ import annotations

import argparse
import sys

from ..analyze.programs import mixed_programs, split_by
from ..analyze.renderers import FORMATS
from ..analyze.report import ByReport, WhatIfReport
from ..analyze.storage_floor import combine
from ..analyze.whatif import ALL, LEVERS, Options, project
from ._by import check_by
from ._clickhouse import add_clickhouse_arguments, files_or_clickhouse, load_clickhouse
from ._inputs import add_file_arguments, expand_paths, load_files, load_reference, require_startups, write_report
from .errors import EXIT_NO_STARTUP, EXIT_USAGE, CliError

MAX_KEEP_SIZES = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="PATH",
                        help="trace files or directories; a storage floor document (otel-coldstart floor --json) "
                             "among them is the warm/cold read reference")
    add_file_arguments(parser)
    parser.add_argument("--lever", action="append", choices=LEVERS + (ALL,), default=None, metavar="NAME",
                        help=f"a lever to project (repeatable): {', '.join(LEVERS)}, or {ALL} (every lever "
                             "together, no second counted twice); default: every lever that applies, and all")
    parser.add_argument("--keep-capture-sizes", metavar="N,N,...", default=None,
                        help="fewer-captures: the CUDA graph batch sizes kept (default: powers of two up to the "
                             "largest captured)")
    parser.add_argument("--reference", action="append", default=[], metavar="PATH",
                        help="trace files or directories whose start-ups the levers learn from (resident-read "
                             "rates, pinned rates, cache-hit costs) without projecting them (repeatable)")
    parser.add_argument("--until", choices=("ready", "first-token"), default="ready",
                        help="where each start-up ends: ready() (default) or its first token (ready() plus its "
                             "first request as measured); start-ups without a first token are left out, said so")
    parser.add_argument("--by", action="append", default=None, metavar="ATTRIBUTE",
                        help="project each value of this resource or root-span attribute apart, as capacity --by "
                             "groups (repeatable; e.g. process.command: programs under one service name)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="report format (default %(default)s; json: schema otel-coldstart.whatif/1)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")
    add_clickhouse_arguments(parser)


def parse_sizes(text: str | None) -> frozenset[int] | None:
    if text is None:
        return None
    sizes = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0 or len(part) > 9:
            raise CliError(f"--keep-capture-sizes: {part!r} is not a positive batch size "
                           "(give e.g. --keep-capture-sizes 1,2,4,8)", EXIT_USAGE)
        sizes.add(int(part))
    if len(sizes) > MAX_KEEP_SIZES:
        raise CliError(f"--keep-capture-sizes: more than {MAX_KEEP_SIZES} sizes", EXIT_USAGE)
    return frozenset(sizes)


def run(args: argparse.Namespace) -> int:
    keep = parse_sizes(args.keep_capture_sizes)  # usage errors before anything is read
    if files_or_clickhouse(args, args.files):
        inputs = load_clickhouse(args, spans_too=True)  # the levers read each start-up's spans
    else:
        inputs = load_files(expand_paths(args.files), args)
    results = require_startups(inputs, args.trace_id)
    reference = load_reference(args)
    floors = [f for f in (inputs.floor, reference.floor if reference else None) if f is not None]
    options = Options(floor=combine(floors), keep_capture_sizes=keep,
                      reference=tuple(reference.startups) if reference else ())
    skipped = inputs.skipped + (reference.skipped if reference else [])
    check_by(results, args.by)
    if args.by:
        write_report("whatif", _by_program(results, args, options, skipped), args)
    else:
        try:
            result = project(results, args.lever, options, until=args.until)
        except ValueError as exc:  # every start-up given stopped before ready()
            raise CliError(f"{', '.join(s['source'] for s in inputs.sources[:3])}: {exc}", EXIT_NO_STARTUP) from None
        write_report("whatif", WhatIfReport(result, skipped), args)
    if skipped:
        print(f"otel-coldstart: warning: {len(skipped)} input(s) left out of this report", file=sys.stderr)
    for note in mixed_programs(results, args.by or (), "whatif"):  # two programs under one service name, pooled
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    return inputs.exit_code(reference.exit_code() if reference else 0)


def _by_program(results, args: argparse.Namespace, options: Options, skipped) -> ByReport:
    """A projection per value of each --by attribute; a value none of whose start-ups reached
    ready() is said so and left out (exit 5 when that is every value)."""
    groups, notes = [], []
    for key, value, members in split_by(results, args.by):
        try:
            groups.append((key, value, f"{len(members)} start-up(s)",
                           WhatIfReport(project(members, args.lever, options, until=args.until), skipped)))
        except ValueError as exc:
            notes.append(f"{key} = {value!r} ({len(members)} start-up(s)) left out: {exc}")
    if not groups:
        raise CliError(f"--by {', '.join(args.by)}: no value has a start-up to project: {'; '.join(notes)}",
                       EXIT_NO_STARTUP)
    return ByReport("whatif", groups, notes)
