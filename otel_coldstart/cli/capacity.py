"""``otel-coldstart capacity FILES...``: p50/p95 start-up per phase, overall and per
instance type (or another resource attribute), and the autoscaler lead time it implies."""

from __future__ import annotations

import argparse
import json

from ..analyze.capacity import DEFAULT_GROUP_KEYS, capacity_summary
from ..analyze.units import format_seconds, parse_duration_ns
from ..analyze.escape import terminal_text
from ._inputs import add_file_arguments, expand_paths, load_file, output, require_startups, warn
from .errors import EXIT_USAGE, CliError

HELP = "p50/p95 start-up per phase and per instance type over many traces, and the autoscaler lead time."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files or directories")
    add_file_arguments(parser)
    parser.add_argument("--by", action="append", default=None, metavar="ATTRIBUTE",
                        help="resource attribute to group by (repeatable; default host.type)")
    parser.add_argument("--provisioning", default="0s", metavar="DURATION",
                        help="node provisioning time to add to the lead time, e.g. 90s")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")


def run(args: argparse.Namespace) -> int:
    try:
        provisioning = parse_duration_ns(args.provisioning)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    loaded = [load_file(p, args) for p in expand_paths(args.files)]
    warn(loaded)
    summaries = capacity_summary(require_startups(loaded, args.trace_id), args.by or DEFAULT_GROUP_KEYS)
    with output(args.output) as out:
        if args.format == "json":
            json.dump({"schema": "otel-coldstart.capacity/1", "provisioning_s": provisioning / 1e9, "groups": [
                {"attribute": s.key or None, "value": s.value, "startups": s.count, "ready": s.ready,
                 "total": {"p50_s": s.total.p50_ns / 1e9, "p95_s": s.total.p95_ns / 1e9,
                           "max_s": s.total.max_ns / 1e9},
                 "phases": {name: {"p50_s": q.p50_ns / 1e9, "p95_s": q.p95_ns / 1e9} for name, q in s.phases.items()},
                 "lead_time_s": s.lead_time_ns(provisioning) / 1e9} for s in summaries]}, out, indent=2)
            out.write("\n")
            return 0
        for s in summaries:
            title = "all start-ups" if not s.key else terminal_text(f"{s.key}={s.value}")
            out.write(f"{title}: {s.count} start-up(s), {s.ready} ready; total p50 "
                      f"{format_seconds(s.total.p50_ns)}, p95 {format_seconds(s.total.p95_ns)}, "
                      f"max {format_seconds(s.total.max_ns)}\n")
            top = sorted(s.phases.items(), key=lambda kv: -kv[1].p95_ns)[:6]
            for name, q in top:
                out.write(f"    {terminal_text(name):<18} p50 {format_seconds(q.p50_ns):>10}"
                          f"   p95 {format_seconds(q.p95_ns):>10}\n")
            out.write(f"    autoscaler lead time: {format_seconds(s.lead_time_ns(provisioning))} "
                      f"(provisioning {format_seconds(provisioning)} + p95 start-up): scale out at least "
                      "this long before the load arrives\n")
    return 0
