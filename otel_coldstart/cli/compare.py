"""``otel-coldstart compare A B``: what got slower between two start-ups or two sets
(before/after a rollout); each side is a file or a directory of trace files. Per phase:
medians with their spread, the delta, and a verdict (slower / faster / within noise) from
a Mann-Whitney U test and a minimum effect size (analyze/compare.py)."""

from __future__ import annotations

import argparse
import json
import sys

from ..analyze.compare import ALPHA, MIN_EFFECT_NS, MIN_EFFECT_RATIO, compare
from ..analyze.escape import markdown_text, terminal_text
from ..analyze.units import format_seconds
from ._inputs import add_file_arguments, expand_paths, load_files, output, require_startups

HELP = ("Per-phase medians, spread and a verdict (slower / faster / within noise) between two traces "
        "or two sets of traces.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="baseline: a trace file or a directory of them")
    parser.add_argument("b", metavar="B", help="candidate: a trace file or a directory of them")
    add_file_arguments(parser)
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")


def _side(path: str, args: argparse.Namespace):
    inputs = load_files(expand_paths([path]), args)
    return inputs, require_startups(inputs, args.trace_id)


def _ratio(row) -> str:
    return f"{row.ratio:.2f}x" if row.ratio is not None else "new"


def _spread(q) -> str:
    return f"{format_seconds(q[0])}-{format_seconds(q[1])}"


def run(args: argparse.Namespace) -> int:
    a_inputs, a = _side(args.a, args)
    b_inputs, b = _side(args.b, args)
    result = compare(a, b)
    rows = (result.total,) + result.rows
    header = (f"A: {args.a} ({result.a_count} start-ups; {result.a_cache.describe()})   "
              f"B: {args.b} ({result.b_count} start-ups; {result.b_cache.describe()})")
    rule = (f"verdict: Mann-Whitney U p < {ALPHA} and a median change of at least "
            f"{format_seconds(MIN_EFFECT_NS)} and {MIN_EFFECT_RATIO:.0%}")
    with output(args.output) as out:
        if args.format == "json":
            doc = {"schema": "otel-coldstart.compare/2",
                   "a": {"path": args.a, "startups": result.a_count, "cache": vars(result.a_cache)},
                   "b": {"path": args.b, "startups": result.b_count, "cache": vars(result.b_cache)},
                   "header": header, "rule": rule, "warnings": result.warnings,
                   "rows": [{"phase": r.phase, "a_s": r.a_ns / 1e9, "b_s": r.b_ns / 1e9,
                             "a_iqr_s": [v / 1e9 for v in r.a_iqr], "b_iqr_s": [v / 1e9 for v in r.b_iqr],
                             "delta_s": r.delta_ns / 1e9, "ratio": r.ratio, "p_value": round(r.p_value, 6),
                             "verdict": r.verdict} for r in rows],
                   "slower": [r.phase for r in result.slower()], "faster": [r.phase for r in result.faster()],
                   "total_verdict": result.total.verdict}
            json.dump(doc, out, indent=2)
            out.write("\n")
        else:
            _table(result, rows, header, rule, args.format == "markdown", out)
    for note in result.warnings:  # also in the report; here after it was written (a failed write says only that)
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    return a_inputs.exit_code(b_inputs.exit_code())


def _table(result, rows, header, rule, markdown: bool, out) -> None:
    if markdown:
        out.write(f"**{header}**\n\n")
        for note in result.warnings:
            out.write(f"> warning: {note}\n\n")
        out.write("| phase | A median (IQR) | B median (IQR) | delta | ratio | p | verdict |\n"
                  "|---|---:|---:|---:|---:|---:|---|\n")
    else:
        out.write(header + "\n")
        for note in result.warnings:
            out.write(f"warning: {note}\n")
        out.write(f"  {'phase':<16}{'A median (IQR)':>31}{'B median (IQR)':>31}{'delta':>11}{'ratio':>8}"
                  f"{'p':>8}  verdict\n")
    for row in rows:
        sign = "+" if row.delta_ns >= 0 else "-"
        phase = markdown_text(row.phase) if markdown else terminal_text(row.phase)  # from the trace
        cells = (phase, f"{format_seconds(row.a_ns)} ({_spread(row.a_iqr)})",
                 f"{format_seconds(row.b_ns)} ({_spread(row.b_iqr)})", sign + format_seconds(abs(row.delta_ns)),
                 _ratio(row), f"{row.p_value:.3f}", row.verdict)
        if markdown:
            out.write("| " + " | ".join(cells) + " |\n")
        else:
            out.write(f"  {cells[0]:<16}{cells[1]:>31}{cells[2]:>31}{cells[3]:>11}{cells[4]:>8}{cells[5]:>8}"
                      f"  {cells[6]}\n")
    slower, faster = result.slower(), result.faster()
    lines = []
    name = markdown_text if markdown else terminal_text
    lines.append("slower in B: " + ", ".join(f"{name(r.phase)} (+{format_seconds(r.delta_ns)})" for r in slower)
                 if slower else "nothing got slower in B beyond noise")
    if faster:
        lines.append("faster in B: " + ", ".join(f"{name(r.phase)} (-{format_seconds(-r.delta_ns)})" for r in faster))
    lines.append(f"total: {result.total.verdict}")
    lines.append(rule)
    out.write("\n" + ("\n\n" if markdown else "\n").join(lines) + "\n")
