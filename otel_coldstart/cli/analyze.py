"""``otel-coldstart analyze``: the breakdown and findings of the start-ups in trace files or
in Jaeger/Tempo, as text, Markdown or JSON, with optional waterfalls and CI budgets."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from .._regular_files import open_regular
from ..analyze.budgets import (
    check_budgets,
    parse_budget_file,
    parse_budget_specs,
    unknown_budget_keys,
    valid_budget_keys,
)
from ..analyze.end_reasons import end_word
from ..analyze.findings import find
from ..analyze.render_html import trace_link
from ..analyze.render_svg import render_svg
from ..analyze.renderers import FORMATS
from ..analyze.report import Budget, Report
from ._inputs import (
    add_file_arguments,
    add_live_arguments,
    check_live_arguments,
    expand_paths,
    load_files,
    load_live,
    load_reference,
    output,
    require_startups,
    write_report,
)
from .errors import (
    EXIT_BUDGET_EXCEEDED,
    EXIT_INPUT_UNREADABLE,
    EXIT_NOT_READY,
    EXIT_OUTPUT_FAILED,
    EXIT_STARTUP_KILLED,
    EXIT_USAGE,
    EXIT_WOULD_OVERWRITE,
    CliError,
)

MAX_BUDGET_FILE_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="trace files or directories (OTLP JSON/JSON Lines, Jaeger, Tempo, Zipkin JSON); "
                             "a storage floor document (otel-coldstart floor --json) among them is used as "
                             "the reference for per-byte findings")
    add_file_arguments(parser)
    add_live_arguments(parser)
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="report format (default %(default)s; json: schema otel-coldstart.analysis/1; "
                             "html: one self-contained page with waterfalls, phase chart and findings)")
    parser.add_argument("--trace-url", metavar="TEMPLATE",
                        help="link each start-up to its trace: a URL with {trace_id}, e.g. "
                             "http://jaeger:16686/trace/{trace_id} (default: from --jaeger/--tempo)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")
    parser.add_argument("--waterfall", metavar="DIR",
                        help="write one self-contained SVG waterfall per start-up into DIR (created if "
                             "needed; an SVG already there is kept and reported, unless --force)")
    parser.add_argument("--force", action="store_true",
                        help="replace waterfall SVGs that already exist in the --waterfall DIR")
    parser.add_argument("--budget", action="append", default=[], metavar="KEY=DURATION",
                        help="fail (exit 8) when a start-up exceeds it: total=90s, h2d=10s, unattributed=5s")
    parser.add_argument("--budget-file", metavar="FILE", help="budgets as JSON object or KEY=DURATION lines")
    parser.add_argument("--require-ready", action="store_true",
                        help="exit 13 when any start-up did not reach ready() (killed, SIGTERM, crashed, exited): "
                             "a CI gate without parsing the JSON")
    parser.add_argument("--reference", action="append", default=[], metavar="PATH",
                        help="trace files or directories whose start-ups the findings' savings learn from "
                             "(resident-read rates, cache-hit costs, as whatif --reference) without reporting "
                             "them (repeatable)")


def _budget(args: argparse.Namespace) -> dict[str, int]:
    try:
        budget = parse_budget_specs(args.budget)
        if args.budget_file:
            try:
                # A regular file only, and a budget is a few lines: /dev/zero is not one.
                with open_regular(args.budget_file, "r", encoding="utf-8") as handle:
                    text = handle.read(MAX_BUDGET_FILE_BYTES + 1)
                if len(text) > MAX_BUDGET_FILE_BYTES:
                    raise CliError(f"{args.budget_file}: over {MAX_BUDGET_FILE_BYTES >> 10} KiB; not a budget file",
                                   EXIT_USAGE)
            except (OSError, UnicodeDecodeError) as exc:
                raise CliError(f"cannot read {args.budget_file}: {getattr(exc, 'strerror', None) or exc}",
                               EXIT_INPUT_UNREADABLE) from None
            budget = {**parse_budget_file(text), **budget}
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return budget


def run(args: argparse.Namespace) -> int:
    live = bool(args.jaeger or args.tempo)
    if live == bool(args.files) or (args.jaeger and args.tempo):
        raise CliError("give trace FILEs, or one of --jaeger URL / --tempo URL", EXIT_USAGE)
    if live:
        check_live_arguments(args)
    budget = _budget(args)
    if args.waterfall:
        check_waterfall_directory(args.waterfall)
    inputs = load_live(args) if live else load_files(expand_paths(args.files), args)
    results = require_startups(inputs, args.trace_id)
    unknown = unknown_budget_keys(budget, {p.phase for b in results for p in b.phases})
    if unknown:
        raise CliError(f"unknown budget key(s): {', '.join(unknown)}; valid keys: "
                       f"{', '.join(valid_budget_keys({p.phase for b in results for p in b.phases}))}", EXIT_USAGE)
    violations = check_budgets(results, budget)
    reference = load_reference(args)
    floor = inputs.floor or (reference.floor if reference else None)
    report = Report(results, find(results, floor, tuple(reference.startups) if reference else ()), inputs.sources,
                    inputs.skipped + (reference.skipped if reference else []), floor,
                    Budget(budget, violations) if budget else None,
                    trace_link(args.trace_url, args.jaeger, args.tempo))
    write_report("analyze", report, args)
    kept = _write_waterfalls(results, args.waterfall, args.force) if args.waterfall else 0
    for violation in violations:
        print(f"otel-coldstart: over budget: {violation.describe()}", file=sys.stderr)
    if inputs.partial:
        print(f"otel-coldstart: warning: {len(inputs.skipped)} part(s) of the input left out or repaired "
              "(each named above) in this report "
              f"(exit {inputs.exit_code()})", file=sys.stderr)
    unready = [b for b in results if not b.ready] if args.require_ready else []
    if unready:
        words = Counter(end_word(b) for b in unready)
        print(f"otel-coldstart: {len(unready)} of {len(results)} start-ups did not reach ready() "
              f"({', '.join(f'{n} {word}' for word, n in sorted(words.items()))}; --require-ready)", file=sys.stderr)
    # A budget excess (8), then a waterfall that was not written (6), then a start-up that did
    # not reach ready() under --require-ready (13), a killed start-up (11), inputs left out (12).
    code = (EXIT_BUDGET_EXCEEDED if violations else EXIT_WOULD_OVERWRITE if kept
            else EXIT_NOT_READY if unready
            else EXIT_STARTUP_KILLED if any(b.killed for b in results) else 0)
    return inputs.exit_code(code)


def check_waterfall_directory(directory: str) -> None:
    """``--waterfall`` names a directory (made if missing): a path that is something else is
    the caller's mistake, found before anything is read."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CliError(f"--waterfall {directory}: not a directory (the waterfalls are written into one, "
                       "an SVG file per start-up)", EXIT_USAGE)


def _write_waterfalls(results, directory: str, force: bool) -> int:
    """One SVG per start-up, after the report is out. An existing directory is fine; an SVG
    already there is kept (one line each, and exit 6 once everything else is done) unless
    ``force``. Returns how many were kept."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--waterfall {directory}: cannot create the directory ({exc.strerror or exc})",
                       EXIT_OUTPUT_FAILED) from None
    kept = 0
    for b in results:
        rank = f"-rank{b.rank}" if b.rank is not None else ""
        path = os.path.join(directory, f"startup-{b.trace_id[:16]}-{b.root.span_id[:8]}{rank}.svg")
        if os.path.lexists(path):
            if not force or not os.path.isfile(path) or os.path.islink(path):
                print(f"otel-coldstart: error: {path} exists; not overwriting it (--force replaces it)",
                      file=sys.stderr)
                kept += 1
                continue
            os.unlink(path)
        with output(path, "--waterfall") as handle:
            render_svg(Report([b]), handle)
        print(f"otel-coldstart: waterfall written to {path}", file=sys.stderr)
    return kept
