"""``otel-coldstart capacity FILES...``: p50/p95 start-up per phase, overall and per
instance type (or another resource attribute), the dominant phase of each group, and the
autoscaler lead time it implies; as text, Markdown, JSON or a self-contained HTML page.
Start-ups that did not reach ready() are counted apart (their own line, by end reason) and
left out of the percentiles unless ``--include-unready``. The formats are in
analyze/render_capacity.py."""

from __future__ import annotations

import argparse
import sys

from ..analyze.capacity import DEFAULT_GROUP_KEYS, FIRST_TOKEN, READY, UNTIL, capacity_summary
from ..analyze.programs import mixed_programs
from ..analyze.renderers import FORMATS
from ..analyze.report import CapacityReport
from ..analyze.units import parse_duration_ns
from ._by import check_by
from ._clickhouse import add_clickhouse_arguments, files_or_clickhouse, load_clickhouse
from ._inputs import (
    add_file_arguments,
    add_jobs_argument,
    check_number,
    expand_paths,
    load_files,
    require_startups,
    write_report,
)
from ._prometheus import add_prometheus_arguments, run_prometheus
from .errors import EXIT_NO_STARTUP, EXIT_USAGE, CliError

MAX_RAMP_PER_MIN = 1e6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="trace files or directories (or --clickhouse URL)")
    add_file_arguments(parser)
    add_jobs_argument(parser)
    parser.add_argument("--by", action="append", default=None, metavar="ATTRIBUTE",
                        help="resource attribute to group by (repeatable; default host.type)")
    parser.add_argument("--provisioning", default="0s", metavar="DURATION",
                        help="node provisioning time to add to the lead time, e.g. 90s")
    parser.add_argument("--ramp", type=float, default=None, metavar="REPLICAS_PER_MIN",
                        help="demand ramp in replicas per minute: adds the warm pool that covers the lead time")
    parser.add_argument("--include-unready", action="store_true",
                        help="count start-ups that did not reach ready() (killed, SIGTERM, crashed) in the "
                             "percentiles; by default they are counted apart, by how they ended")
    parser.add_argument("--until", choices=UNTIL, default=READY,
                        help="where each start-up ends: ready() (default) or its first token (ready() plus the "
                             "first request after it, without the wait for traffic between them); start-ups "
                             "without a first token are counted apart")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")
    add_clickhouse_arguments(parser)
    add_prometheus_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        provisioning = parse_duration_ns(args.provisioning)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.ramp is not None:
        check_number(args.ramp, "--ramp", MAX_RAMP_PER_MIN)
    if args.prometheus:
        if args.files or args.clickhouse:
            raise CliError("--prometheus reads the histograms alone: no trace files or --clickhouse with it",
                           EXIT_USAGE)
        return run_prometheus(args, provisioning)
    if files_or_clickhouse(args, args.files):
        inputs = load_clickhouse(args)
    else:
        inputs = load_files(expand_paths(args.files), args, slim=True)
    results = require_startups(inputs, args.trace_id)
    check_by(results, args.by)
    summaries = capacity_summary(results, args.by or DEFAULT_GROUP_KEYS, args.include_unready, args.until)
    if summaries[0].total is None and args.until == FIRST_TOKEN:
        raise CliError(f"none of the {summaries[0].count} start-up(s) has a first token "
                       f"({summaries[0].unready.describe()}): mark it with otel_coldstart.first_request() "
                       "(vLLM's plugin marks it itself)", EXIT_NO_STARTUP)
    if summaries[0].total is None:
        raise CliError(f"none of the {summaries[0].count} start-up(s) reached ready() "
                       f"({summaries[0].unready.describe()}); --include-unready summarises them as they are",
                       EXIT_NO_STARTUP)
    report = CapacityReport(summaries, provisioning, tuple(inputs.skipped), args.include_unready, args.ramp)
    write_report("capacity", report, args)
    for note in mixed_programs(results, args.by or ()):  # two programs under one service name, pooled
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    return inputs.exit_code()
