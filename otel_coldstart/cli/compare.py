"""``otel-coldstart compare A B``: what got slower between two start-ups or two sets
(before/after a rollout); each side is a file or a directory of trace files. Per phase:
medians with their spread, the delta, and a verdict (slower / faster / within noise) from
a Mann-Whitney U test and a minimum effect size (analyze/compare.py). Start-ups that did not
reach ready() are counted apart and left out unless ``--include-unready``."""

from __future__ import annotations

import argparse
import sys

from ..analyze.compare import compare
from ..analyze.programs import mixed_programs, split_by
from ..analyze.renderers import FORMATS
from ..analyze.report import ByReport, CompareReport, Side, split_unready
from ._by import check_by
from ._clickhouse import add_clickhouse_arguments, files_or_clickhouse, load_clickhouse
from ._inputs import (
    Inputs,
    add_file_arguments,
    add_jobs_argument,
    expand_paths,
    load_sides,
    require_startups,
    write_report,
)
from .errors import EXIT_NO_STARTUP, CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="baseline: a trace file or a directory of them (with --clickhouse: "
                        "a condition, e.g. resource.service.version=1.2)")
    parser.add_argument("b", metavar="B", help="candidate: a trace file or a directory of them (with --clickhouse: "
                        "a condition)")
    add_file_arguments(parser)
    add_jobs_argument(parser)
    parser.add_argument("--include-unready", action="store_true",
                        help="count start-ups that did not reach ready() (killed, SIGTERM, crashed) in the "
                             "statistics; by default they are counted apart, by how they ended")
    parser.add_argument("--by", action="append", default=None, metavar="ATTRIBUTE",
                        help="compare each value of this resource or root-span attribute apart (A's against B's), "
                             "as capacity --by groups (repeatable; e.g. process.command)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="report format (default %(default)s; html: one self-contained page)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")
    add_clickhouse_arguments(parser)


def _side(name: str, path: str, inputs: Inputs, args: argparse.Namespace):
    startups = require_startups(inputs, args.trace_id)
    counted, unready = split_unready(startups, args.include_unready)
    if not counted:
        raise CliError(f"{name}: {path}: none of its {len(startups)} start-up(s) reached ready() "
                       f"({unready.describe()}); --include-unready compares them as they are", EXIT_NO_STARTUP)
    return inputs, counted, Side(path, len(startups), unready, tuple(inputs.skipped))


def run(args: argparse.Namespace) -> int:
    if files_or_clickhouse(args, [] if args.clickhouse else [args.a]):
        # A and B are conditions on the same selection: one release against another, say
        sides = iter([load_clickhouse(args, [args.a], label=f"A: {args.a}"),
                      load_clickhouse(args, [args.b], label=f"B: {args.b}")])
        return _compare(args, sides, lambda: None)
    a_paths = expand_paths([args.a])
    try:
        b_paths, b_missing = expand_paths([args.b]), None
    except CliError as exc:  # said after A is read and looked at, as when the sides were read in turn
        b_paths, b_missing = [], exc
    sides = load_sides([a_paths, b_paths] if b_paths else [a_paths], args, slim=True)

    def b_is_there() -> None:
        if b_missing is not None:
            raise b_missing

    return _compare(args, sides, b_is_there)


def _compare(args: argparse.Namespace, sides, b_is_there) -> int:
    if args.by:
        return _compare_by(args, sides, b_is_there)
    a_inputs, a, a_side = _side("A", args.a, next(sides), args)
    b_is_there()
    b_inputs, b, b_side = _side("B", args.b, next(sides), args)
    report = CompareReport(compare(a, b), a_side, b_side, args.include_unready)
    write_report("compare", report, args)
    for note in report.comparison.warnings:  # also in the report; here after it was written (a failed write says only that)
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    for name, side in (("A", a), ("B", b)):  # two programs under one service name, pooled in a side
        for note in mixed_programs(side, (), "compare"):
            print(f"otel-coldstart: warning: {name}: {note}", file=sys.stderr)
    return a_inputs.exit_code(b_inputs.exit_code())


def _compare_by(args: argparse.Namespace, sides, b_is_there) -> int:
    """A against B per value of each --by attribute; a value without a start-up that reached
    ready() on both sides is said so and left out (exit 5 when that is every value)."""
    a_inputs = next(sides)
    a_all = require_startups(a_inputs, args.trace_id)
    b_is_there()
    b_inputs = next(sides)
    b_all = require_startups(b_inputs, args.trace_id)
    check_by(list(a_all) + list(b_all), args.by)
    b_groups = {(key, value): members for key, value, members in split_by(b_all, args.by)}
    a_groups = {(key, value): members for key, value, members in split_by(a_all, args.by)}
    groups: list = []
    notes: list[str] = []
    warnings: list[str] = []
    for key, value in sorted(a_groups.keys() | b_groups.keys(), key=lambda kv: (args.by.index(kv[0]), kv[1])):
        label = f"{key} = {value!r}"
        a_members, b_members = a_groups.get((key, value), []), b_groups.get((key, value), [])
        a_counted, a_unready = split_unready(a_members, args.include_unready)
        b_counted, b_unready = split_unready(b_members, args.include_unready)
        if not a_counted or not b_counted:
            notes.append(f"{label} left out: A has {len(a_counted)} and B {len(b_counted)} start-up(s) to compare "
                         f"(of {len(a_members)} and {len(b_members)})")
            continue
        report = CompareReport(compare(a_counted, b_counted),
                               Side(args.a, len(a_members), a_unready, tuple(a_inputs.skipped)),
                               Side(args.b, len(b_members), b_unready, tuple(b_inputs.skipped)), args.include_unready)
        groups.append((key, value, f"A {len(a_members)}, B {len(b_members)} start-up(s)", report))
        warnings.extend(f"{label}: {note}" for note in report.comparison.warnings)
    if not groups:
        raise CliError(f"--by {', '.join(args.by)}: no value has start-ups that reached ready() on both sides: "
                       f"{'; '.join(notes)}", EXIT_NO_STARTUP)
    write_report("compare", ByReport("compare", groups, notes), args)
    for note in warnings:
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    for name, side in (("A", a_all), ("B", b_all)):  # programs the attributes asked for do not tell apart
        for note in mixed_programs(side, args.by, "compare"):
            print(f"otel-coldstart: warning: {name}: {note}", file=sys.stderr)
    return a_inputs.exit_code(b_inputs.exit_code())
