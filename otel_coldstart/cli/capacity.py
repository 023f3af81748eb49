"""``otel-coldstart capacity FILES...``: p50/p95 start-up per phase, overall and per
instance type (or another resource attribute), the dominant phase of each group, and the
autoscaler lead time it implies; as text, Markdown, JSON or a self-contained HTML page."""

from __future__ import annotations

import argparse
import html
import json

from .. import semconv
from ..analyze.capacity import DEFAULT_GROUP_KEYS, capacity_summary, known_keys
from ..analyze.escape import markdown_text, terminal_text
from ..analyze.units import format_seconds, parse_duration_ns
from ._inputs import add_file_arguments, check_number, expand_paths, load_files, output, require_startups
from .errors import EXIT_USAGE, CliError

HELP = ("p50/p95 start-up per phase and per instance type over many traces, the autoscaler lead time and, "
        "for a demand ramp, the warm pool.")
MAX_RAMP_PER_MIN = 1e6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files or directories")
    add_file_arguments(parser)
    parser.add_argument("--by", action="append", default=None, metavar="ATTRIBUTE",
                        help="resource attribute to group by (repeatable; default host.type)")
    parser.add_argument("--provisioning", default="0s", metavar="DURATION",
                        help="node provisioning time to add to the lead time, e.g. 90s")
    parser.add_argument("--ramp", type=float, default=None, metavar="REPLICAS_PER_MIN",
                        help="demand ramp in replicas per minute: adds the warm pool that covers the lead time")
    parser.add_argument("--format", choices=("text", "markdown", "json", "html"), default="text",
                        help="report format (default %(default)s)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here (never overwrites)")


def _lead(s, provisioning: int) -> str:
    return (f"autoscaler lead time: {format_seconds(s.lead_time_ns(provisioning))} (provisioning "
            f"{format_seconds(provisioning)} + p95 start-up): scale out at least this long before the load arrives")


def _warm(s, provisioning: int, ramp: float | None) -> str | None:
    if ramp is None:
        return None
    return (f"warm pool: {s.warm_pool(ramp, provisioning).arithmetic()}: for the lead time no new replica "
            "serves, so the demand that arrives meanwhile needs replicas already warm")


def run(args: argparse.Namespace) -> int:
    try:
        provisioning = parse_duration_ns(args.provisioning)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.ramp is not None:
        check_number(args.ramp, "--ramp", MAX_RAMP_PER_MIN)
    inputs = load_files(expand_paths(args.files), args)
    results = require_startups(inputs, args.trace_id)
    if args.by:
        known = known_keys(results)
        missing = [key for key in args.by if key not in known]
        if missing:
            raise CliError(f"--by {', '.join(missing)}: no start-up has this attribute; known keys: "
                           f"{', '.join(known) or '(none)'}", EXIT_USAGE)
    summaries = capacity_summary(results, args.by or DEFAULT_GROUP_KEYS)
    with output(args.output) as out:
        if args.format == "json":
            json.dump({"schema": "otel-coldstart.capacity/1", "provisioning_s": provisioning / 1e9, "groups": [
                {"attribute": s.key or None, "value": s.value, "startups": s.count, "ready": s.ready,
                 "total": {"p50_s": s.total.p50_ns / 1e9, "p95_s": s.total.p95_ns / 1e9,
                           "max_s": s.total.max_ns / 1e9},
                 "p95_caveat": s.p95_caveat, "dominant_phase": s.dominant_phase,
                 "phases": {name: {"p50_s": q.p50_ns / 1e9, "p95_s": q.p95_ns / 1e9} for name, q in s.phases.items()},
                 "lead_time_s": s.lead_time_ns(provisioning) / 1e9,
                 "warm_pool": _warm_doc(s, provisioning, args.ramp)} for s in summaries],
                "ramp_replicas_per_min": args.ramp, "skipped": inputs.skipped}, out, indent=2)
            out.write("\n")
        elif args.format == "markdown":
            _markdown(summaries, provisioning, out, args.ramp)
        elif args.format == "html":
            _html(summaries, provisioning, out, args.ramp)
        else:
            _text(summaries, provisioning, out, args.ramp)
    return inputs.exit_code()


def _warm_doc(s, provisioning: int, ramp: float | None) -> dict | None:
    if ramp is None:
        return None
    pool = s.warm_pool(ramp, provisioning)
    return {"replicas": pool.replicas, "exact": pool.exact, "lead_time_s": pool.lead_time_ns / 1e9,
            "arithmetic": pool.arithmetic()}


def _title(s) -> str:
    return "all start-ups" if not s.key else f"{s.key}={s.value}"  # escaped by each format


def _top(s):
    return sorted(s.phases.items(), key=lambda kv: -kv[1].p95_ns)[:8]


def _text(summaries, provisioning: int, out, ramp: float | None = None) -> None:
    for s in summaries:
        out.write(f"{terminal_text(_title(s))}: n={s.count} start-up(s), {s.ready} ready; total p50 "
                  f"{format_seconds(s.total.p50_ns)}, p95 {format_seconds(s.total.p95_ns)}, "
                  f"max {format_seconds(s.total.max_ns)}\n")
        if s.p95_caveat:
            out.write(f"    caveat: {s.p95_caveat}\n")
        dominant = s.dominant_phase or "none (no phase holds 20% of the p50 start-up)"
        out.write(f"    dominant phase: {terminal_text(dominant)}\n")
        for name, q in _top(s):
            out.write(f"    {terminal_text(name):<18} p50 {format_seconds(q.p50_ns):>10}"
                      f"   p95 {format_seconds(q.p95_ns):>10}\n")
        out.write(f"    {_lead(s, provisioning)}\n")
        if ramp is not None:
            out.write(f"    {_warm(s, provisioning, ramp)}\n")


def _md(text: object) -> str:
    return markdown_text(text)


def _markdown(summaries, provisioning: int, out, ramp: float | None = None) -> None:
    out.write("## Start-up capacity\n\n| group | n | ready | p50 | p95 | max | dominant phase | lead time |\n"
              "|---|---:|---:|---:|---:|---:|---|---:|\n")
    for s in summaries:
        out.write(f"| {_md(_title(s))} | {s.count} | {s.ready} | {format_seconds(s.total.p50_ns)} | "
                  f"{format_seconds(s.total.p95_ns)}{' *' if s.p95_caveat else ''} | {format_seconds(s.total.max_ns)} | "
                  f"{_md(s.dominant_phase or 'none')} | {format_seconds(s.lead_time_ns(provisioning))} |\n")
    if any(s.p95_caveat for s in summaries):
        out.write("\n\\* p95 of fewer than 20 start-ups: close to the slowest seen, not a percentile.\n")
    out.write(f"\nLead time = provisioning ({format_seconds(provisioning)}) + p95 start-up: scale out at least "
              "this long before the load arrives.\n")
    if ramp is not None:
        out.write(f"\nWarm pool for a ramp of {ramp:g} replicas/min (ramp x lead time / 60 s, rounded up):\n\n")
        for s in summaries:
            out.write(f"- {_md(_title(s))}: {_md(s.warm_pool(ramp, provisioning).arithmetic())}\n")
    for s in summaries:
        out.write(f"\n### {_md(_title(s))} (n={s.count})\n\n| phase | p50 | p95 |\n|---|---:|---:|\n")
        for name, q in _top(s):
            out.write(f"| {_md(name)} | {format_seconds(q.p50_ns)} | {format_seconds(q.p95_ns)} |\n")


def _html(summaries, provisioning: int, out, ramp: float | None = None) -> None:
    from ..analyze.render_html import CSP, STYLE
    from ..analyze.waterfall import phase_colour

    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    out.write(f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv="
              f"\"Content-Security-Policy\" content=\"{CSP}\"><title>otel-coldstart capacity</title>"
              f"<style>{STYLE}</style></head><body><h1>Start-up capacity</h1>\n")
    for s in summaries:
        out.write(f"<h2>{e(_title(s))} <span class=\"muted\">n={s.count}</span></h2>\n<p>total p50 "
                  f"{e(format_seconds(s.total.p50_ns))}, p95 {e(format_seconds(s.total.p95_ns))}, max "
                  f"{e(format_seconds(s.total.max_ns))}; dominant phase: {e(s.dominant_phase or 'none')}<br>"
                  f"{e(_lead(s, provisioning))}</p>\n")
        if ramp is not None:
            pool = s.warm_pool(ramp, provisioning)
            out.write(f"<p class=\"warm-pool\" data-replicas=\"{pool.replicas}\"><b>{pool.replicas} warm "
                      f"replica(s)</b> <span class=\"muted\">{e(_warm(s, provisioning, ramp))}</span></p>\n")
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
    out.write("</body></html>\n")
