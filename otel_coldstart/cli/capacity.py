"""``otel-coldstart capacity FILES...``: p50/p95 start-up per phase, overall and per
instance type (or another resource attribute), the dominant phase of each group, and the
autoscaler lead time it implies; as text, Markdown, JSON or a self-contained HTML page.
Start-ups that did not reach ready() are counted apart (their own line, by end reason) and
left out of the percentiles unless ``--include-unready``.

The formats are renderers ``render(report, out)`` over a CapacityReport (analyze/report.py)."""

from __future__ import annotations

import argparse
import html
import json
import sys

from .. import semconv
from ..analyze.capacity import DEFAULT_GROUP_KEYS, FIRST_TOKEN, READY, UNTIL, capacity_summary, known_keys
from ..analyze.escape import markdown_text, terminal_text
from ..analyze.programs import mixed_programs
from ..analyze.render import columns
from ..analyze.report import CapacityReport, Renderer
from ..analyze.units import format_seconds, parse_duration_ns
from ._inputs import (add_file_arguments, add_jobs_argument, check_number, expand_paths, load_files, output,
                      require_startups)
from ._clickhouse import add_clickhouse_arguments, files_or_clickhouse, load_clickhouse
from ._prometheus import add_prometheus_arguments, run_prometheus
from .errors import EXIT_NO_STARTUP, EXIT_USAGE, CliError

HELP = ("p50/p95 start-up per phase and per instance type over many traces, the autoscaler lead time and, "
        "for a demand ramp, the warm pool.")
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
    parser.add_argument("--format", choices=("text", "markdown", "json", "html"), default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")
    add_clickhouse_arguments(parser)
    add_prometheus_arguments(parser)


def _lead(s, provisioning: int) -> str:
    if s.total is None:
        return "autoscaler lead time: unknown (no start-up counted)"
    to = "p95 to the first token" if s.until == FIRST_TOKEN else "p95 start-up"
    return (f"autoscaler lead time: {format_seconds(s.lead_time_ns(provisioning))} (provisioning "
            f"{format_seconds(provisioning)} + {to}): scale out at least this long before the load arrives")


def _warm(s, provisioning: int, ramp: float | None) -> str | None:
    """The warm pool that covers the lead time for a demand ramp; None without a ramp or
    without a start-up that reached ready() (no p95 to plan with)."""
    if ramp is None or s.total is None:
        return None
    return (f"warm pool: {s.warm_pool(ramp, provisioning).arithmetic()}: for the lead time no new replica "
            "serves, so the demand that arrives meanwhile needs replicas already warm")


def _warm_doc(s, provisioning: int, ramp: float | None) -> dict | None:
    if ramp is None or s.total is None:
        return None
    pool = s.warm_pool(ramp, provisioning)
    return {"replicas": pool.replicas, "exact": pool.exact, "lead_time_s": pool.lead_time_ns / 1e9,
            "arithmetic": pool.arithmetic()}


def _unready(s, include: bool) -> str | None:
    """The group's start-ups that did not reach ready(), by end reason: their own line."""
    if not s.unready.count:
        return None
    if s.until == FIRST_TOKEN:
        return f"no first token: {s.unready.count} ({s.unready.describe()}): left out of the percentiles"
    what = "counted in the percentiles (--include-unready)" if include else \
        "left out of the percentiles (--include-unready counts them)"
    return f"not ready: {s.unready.count} ({s.unready.describe()}): {what}"


def _totals(s) -> str:
    if s.total is None:
        if s.until == FIRST_TOKEN:
            return "no start-up has a first token: no percentiles"
        return "no start-up reached ready(): no percentiles"
    if s.until == FIRST_TOKEN:
        return (f"to first token p50 {format_seconds(s.total.p50_ns)}, p95 {format_seconds(s.total.p95_ns)}, "
                f"max {format_seconds(s.total.max_ns)} (ready() + the first request; the wait for it after ready(), "
                f"p50 {format_seconds(s.wait.p50_ns)}, p95 {format_seconds(s.wait.p95_ns)}, left out)")
    return (f"total p50 {format_seconds(s.total.p50_ns)}, p95 {format_seconds(s.total.p95_ns)}, "
            f"max {format_seconds(s.total.max_ns)}")


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
    if args.by:
        known = known_keys(results)
        missing = [key for key in args.by if key not in known]
        if missing:
            raise CliError(f"--by {', '.join(missing)}: no start-up has this attribute; known keys: "
                           f"{', '.join(known) or '(none)'}", EXIT_USAGE)
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
    with output(args.output) as out:
        RENDERERS[args.format](report, out)
    for note in mixed_programs(results, args.by or ()):  # two programs under one service name, pooled
        print(f"otel-coldstart: warning: {note}", file=sys.stderr)
    return inputs.exit_code()


def _json(report: CapacityReport, out) -> None:
    provisioning = report.provisioning_ns
    until = report.summaries[0].until if report.summaries else READY
    json.dump({"schema": "otel-coldstart.capacity/2", "provisioning_s": provisioning / 1e9,
               "include_unready": report.include_unready, "until": until, "groups": [
        {"attribute": s.key or None, "value": s.value, "startups": s.count, "ready": s.ready,
         "not_ready": s.unready.count, "not_ready_reasons": dict(s.unready.reasons), "counted": s.counted,
         "total": None if s.total is None else {"p50_s": s.total.p50_ns / 1e9, "p95_s": s.total.p95_ns / 1e9,
                                                "max_s": s.total.max_ns / 1e9},
         "p95_caveat": s.p95_caveat, "dominant_phase": s.dominant_phase,
         "phases": {name: {"p50_s": q.p50_ns / 1e9, "p95_s": q.p95_ns / 1e9} for name, q in s.phases.items()},
         "lead_time_s": None if s.total is None else s.lead_time_ns(provisioning) / 1e9,
         "wait_for_first_request": None if s.wait is None else {"p50_s": s.wait.p50_ns / 1e9,
                                                                "p95_s": s.wait.p95_ns / 1e9},
         "warm_pool": _warm_doc(s, provisioning, report.ramp_per_min)} for s in report.summaries],
        "ramp_replicas_per_min": report.ramp_per_min, "skipped": list(report.skipped)}, out, indent=2)
    out.write("\n")


def _title(s) -> str:
    return "all start-ups" if not s.key else f"{s.key}={s.value}"  # escaped by each format


def _top(s):
    return sorted(s.phases.items(), key=lambda kv: -kv[1].p95_ns)[:8]


def _text(report: CapacityReport, out) -> None:
    for s in report.summaries:
        out.write(f"{terminal_text(_title(s))}: n={s.count} start-up(s), {s.ready} ready; {_totals(s)}\n")
        unready = _unready(s, report.include_unready)
        if unready:
            out.write(f"    {terminal_text(unready)}\n")
        if s.p95_caveat:
            out.write(f"    caveat: {s.p95_caveat}\n")
        if s.total is None:
            continue
        dominant = s.dominant_phase or "none (no phase holds 20% of the p50 start-up)"
        out.write(f"    dominant phase: {terminal_text(dominant)}\n")
        rows = [[terminal_text(name), "p50", format_seconds(q.p50_ns), " p95", format_seconds(q.p95_ns)]
                for name, q in _top(s)]
        for line in columns(rows, right={2, 4}):
            out.write(f"    {line}\n")
        out.write(f"    {_lead(s, report.provisioning_ns)}\n")
        warm = _warm(s, report.provisioning_ns, report.ramp_per_min)
        if warm:
            out.write(f"    {warm}\n")


def _md(text: object) -> str:
    return markdown_text(text)


def _seconds(ns: int | None) -> str:
    return "-" if ns is None else format_seconds(ns)


def _markdown(report: CapacityReport, out) -> None:
    summaries, provisioning = report.summaries, report.provisioning_ns
    out.write("## Start-up capacity\n\n| group | n | ready | not ready | p50 | p95 | max | dominant phase | lead time |\n"
              "|---|---:|---:|---|---:|---:|---:|---|---:|\n")
    for s in summaries:
        total = s.total
        out.write(f"| {_md(_title(s))} | {s.count} | {s.ready} | "
                  f"{_md(f'{s.unready.count} ({s.unready.describe()})') if s.unready.count else 0} | "
                  f"{_seconds(total and total.p50_ns)} | {_seconds(total and total.p95_ns)}{' *' if s.p95_caveat else ''} | "
                  f"{_seconds(total and total.max_ns)} | {_md(s.dominant_phase or 'none')} | "
                  f"{_seconds(s.lead_time_ns(provisioning))} |\n")
    if summaries and summaries[0].until == FIRST_TOKEN:
        out.write("\nEach start-up ends at its first token: ready() plus the first request, without the wait "
                  "for it after ready(). " + "; ".join(f"{_md(_title(s))}: {_md(_totals(s))}" for s in summaries
                                                      if s.total is not None) + ".\n")
        if any(s.unready.count for s in summaries):
            out.write("Start-ups without a first token are counted apart (not ready column), never in the "
                      "percentiles.\n")
    elif any(s.unready.count for s in summaries):
        out.write("\nStart-ups that did not reach ready() are " + (
            "counted in the percentiles (--include-unready).\n" if report.include_unready else
            "left out of the percentiles (--include-unready counts them).\n"))
    if any(s.p95_caveat for s in summaries):
        out.write("\n\\* p95 of fewer than 20 start-ups: close to the slowest seen, not a percentile.\n")
    out.write(f"\nLead time = provisioning ({format_seconds(provisioning)}) + p95 start-up: scale out at least "
              "this long before the load arrives.\n")
    ramp = report.ramp_per_min
    if ramp is not None:
        out.write(f"\nWarm pool for a ramp of {ramp:g} replicas/min (ramp x lead time / 60 s, rounded up):\n\n")
        for s in summaries:
            if s.total is not None:
                out.write(f"- {_md(_title(s))}: {_md(s.warm_pool(ramp, provisioning).arithmetic())}\n")
    for s in summaries:
        out.write(f"\n### {_md(_title(s))} (n={s.count})\n\n| phase | p50 | p95 |\n|---|---:|---:|\n")
        for name, q in _top(s):
            out.write(f"| {_md(name)} | {format_seconds(q.p50_ns)} | {format_seconds(q.p95_ns)} |\n")


def _html(report: CapacityReport, out) -> None:
    from ..analyze.render_html import page_end, page_head
    from ..analyze.waterfall import phase_colour

    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    out.write(page_head("otel-coldstart capacity") + "<h1>Start-up capacity</h1>\n")
    for s in report.summaries:
        out.write(f"<h2>{e(_title(s))} <span class=\"muted\">n={s.count}</span></h2>\n<p>{e(_totals(s))}; "
                  f"dominant phase: {e(s.dominant_phase or 'none')}<br>{e(_lead(s, report.provisioning_ns))}</p>\n")
        warm = _warm(s, report.provisioning_ns, report.ramp_per_min)
        if warm:
            pool = s.warm_pool(report.ramp_per_min, report.provisioning_ns)
            out.write(f"<p class=\"warm-pool\" data-replicas=\"{pool.replicas}\"><b>{pool.replicas} warm "
                      f"replica(s)</b> <span class=\"muted\">{e(warm)}</span></p>\n")
        unready = _unready(s, report.include_unready)
        if unready:
            out.write(f"<p class=\"partial not-ready\">{e(unready)}</p>\n")
        if s.p95_caveat:
            out.write(f"<p class=\"partial\">caveat: {e(s.p95_caveat)}</p>\n")
        scale = max((q.p95_ns for _, q in _top(s)), default=1) or 1
        out.write("<table class=\"data\"><thead><tr><th>phase</th><th class=\"num\">p50</th><th class=\"num\">p95"
                  "</th><th>p50 / p95</th></tr></thead><tbody>\n")
        for name, q in _top(s):
            colour = "#c0392b" if name == semconv.UNATTRIBUTED else phase_colour(name)
            out.write(f"<tr><td>{e(name)}</td><td class=\"num\">{e(format_seconds(q.p50_ns))}</td><td class=\"num\">"
                      f"{e(format_seconds(q.p95_ns))}</td><td class=\"barcell\"><div style=\"width:"
                      f"{q.p50_ns / scale * 100:.1f}%;background:{colour}\"></div><div style=\"width:"
                      f"{q.p95_ns / scale * 100:.1f}%;background:{colour};opacity:.45\"></div></td></tr>\n")
        out.write("</tbody></table>\n")
    out.write(page_end())


RENDERERS: dict[str, Renderer] = {"text": _text, "markdown": _markdown, "json": _json, "html": _html}
