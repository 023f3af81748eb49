"""``otel-coldstart compare A B``: what got slower between two start-ups or two sets
(before/after a rollout); each side is a file or a directory of trace files."""

from __future__ import annotations

import argparse
import json

from ..analyze.compare import compare
from ..analyze.units import format_seconds
from ..analyze.escape import markdown_text, terminal_text
from ._inputs import add_file_arguments, expand_paths, load_file, output, require_startups, warn

HELP = "Per-phase deltas between two traces or two sets of traces (medians), slowest-growing first."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="baseline: a trace file or a directory of them")
    parser.add_argument("b", metavar="B", help="candidate: a trace file or a directory of them")
    add_file_arguments(parser)
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")


def _side(path: str, args: argparse.Namespace):
    loaded = [load_file(p, args) for p in expand_paths([path])]
    warn(loaded)
    return require_startups(loaded, args.trace_id)


def _ratio(row) -> str:
    return f"{row.ratio:.2f}x" if row.ratio is not None else "new"


def run(args: argparse.Namespace) -> int:
    result = compare(_side(args.a, args), _side(args.b, args))
    rows = (result.total,) + result.rows
    with output(args.output) as out:
        if args.format == "json":
            doc = {"schema": "otel-coldstart.compare/1", "a": {"path": args.a, "startups": result.a_count},
                   "b": {"path": args.b, "startups": result.b_count},
                   "rows": [{"phase": r.phase, "a_s": r.a_ns / 1e9, "b_s": r.b_ns / 1e9,
                             "delta_s": r.delta_ns / 1e9, "ratio": r.ratio} for r in rows],
                   "slower": [r.phase for r in result.slower()]}
            json.dump(doc, out, indent=2)
            out.write("\n")
            return 0
        markdown = args.format == "markdown"
        if markdown:
            out.write("| phase | A | B | delta | ratio |\n|---|---:|---:|---:|---:|\n")
        else:
            out.write(f"A: {args.a} ({result.a_count} start-ups)   B: {args.b} ({result.b_count} start-ups)\n")
            out.write(f"  {'phase':<18}{'A':>10}{'B':>10}{'delta':>11}{'ratio':>8}\n")
        for row in rows:
            sign = "+" if row.delta_ns >= 0 else "-"
            phase = markdown_text(row.phase) if markdown else terminal_text(row.phase)  # from the trace
            cells = (phase, format_seconds(row.a_ns), format_seconds(row.b_ns),
                     sign + format_seconds(abs(row.delta_ns)), _ratio(row))
            if markdown:
                out.write("| " + " | ".join(cells) + " |\n")
            else:
                out.write(f"  {cells[0]:<18}{cells[1]:>10}{cells[2]:>10}{cells[3]:>11}{cells[4]:>8}\n")
        slower = result.slower()
        out.write("\n" + ("slower in B: " + ", ".join(
            f"{terminal_text(r.phase)} (+{format_seconds(r.delta_ns)})" for r in slower)
            if slower else "nothing got slower in B")
            + "\n")
    return 0
