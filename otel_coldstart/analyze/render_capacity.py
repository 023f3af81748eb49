"""``capacity`` in every format: text, Markdown, JSON (schema ``otel-coldstart.capacity/2``)
and one self-contained HTML page. Each is a renderer ``render(report, out)`` over a
:class:`~.report.CapacityReport` (analyze/capacity.py computes the summaries); they compute
nothing."""

from __future__ import annotations

import json

from .. import semconv
from .capacity import FIRST_TOKEN, READY
from .escape import html_text, markdown_text as _md, terminal_text
from .render import columns
from .render_html import page_end, page_head
from .report import CapacityReport
from .units import format_seconds
from .waterfall import phase_colour


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


def render_capacity_json(report: CapacityReport, out) -> None:
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


def render_capacity_text(report: CapacityReport, out) -> None:
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


def _seconds(ns: int | None) -> str:
    return "-" if ns is None else format_seconds(ns)


def render_capacity_markdown(report: CapacityReport, out) -> None:
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


def render_capacity_html(report: CapacityReport, out) -> None:
    e = html_text
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
