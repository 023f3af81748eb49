"""One self-contained HTML page for a review: per start-up a summary, the phase breakdown
as a chart, the waterfall (the SVG of render_svg, inline), the shards with their cache
state; the findings with their evidence; for several start-ups, p50/p95 per phase and a
per-shard cold-rate table across runs. Links to each trace when a Jaeger/Tempo URL or a
template is known.

Self-contained: inline CSS and one small inline script (it only marks the page rendered
and lets table rows be highlighted); no fonts, images or requests, and a Content Security
Policy that forbids any (``default-src 'none'``). Everything from a trace is escaped.
"""

from __future__ import annotations

import io
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TextIO
from urllib.parse import quote

from .. import semconv
from .breakdown import Breakdown, bandwidth_warnings, by_trace
from .capacity import summarize_group
from .escape import html_text as _e
from .first_request import lines as first_request_lines
from .grouped_findings import group as group_findings, ranged, several_startups
from .lazy import lines as lazy_lines
from .own_cost import shown as shown_own_cost
from .render import dominant_line, grouped_saving_text, saving_text
from .render_downloads import render_downloads_html
from .render_explain import render_explain_html
from .render_interrupted import render_killed_text, render_stalls_text
from .render_svg import svg_waterfall
from .report import Report
from .units import format_bytes, format_rate, format_seconds
from .waterfall import STATE_COLOURS, phase_colour

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}
h1{font-size:22px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
h3{font-size:15px} table{border-collapse:collapse;margin:8px 0 16px}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;font-size:13px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.hl td{background:#fff7d6} .cold{color:#b3261e;font-weight:bold} .partial{color:#b36b00}
.warm{color:#2b6a9e} .failed{color:#b3261e;font-weight:bold;text-decoration:underline} .muted{color:#666} .chart{display:flex;height:26px;width:900px;border:1px solid #ccc}
.chart div{height:100%} .barcell{width:320px} .barcell div{height:12px}
.finding{border-left:4px solid #d62728;padding:4px 12px;margin:10px 0;background:#fafafa}
.finding.minor{border-color:#aaa} .finding.notable{border-color:#ff9f1c}
.waterfall-box{overflow-x:auto}
"""
SCRIPT = """
document.body.setAttribute('data-rendered','1');
document.querySelectorAll('table.data tbody tr').forEach(function(tr){
  tr.addEventListener('click',function(){tr.classList.toggle('hl');});});
"""


def trace_link(template: str | None, jaeger: str | None = None, tempo: str | None = None):
    """A function trace_id -> URL, or None: a template with ``{trace_id}``, else the UI
    page of the Jaeger or Tempo the traces came from."""
    if template:
        if "{trace_id}" not in template:
            template = template.rstrip("/") + "/{trace_id}"
        return lambda trace_id: template.replace("{trace_id}", quote(trace_id, safe=""))
    if jaeger:
        base = jaeger.rstrip("/")
        return lambda trace_id: f"{base}/trace/{quote(trace_id, safe='')}"
    if tempo:
        base = tempo.rstrip("/")
        return lambda trace_id: f"{base}/api/traces/{quote(trace_id, safe='')}"
    return None


TITLE = "otel-coldstart start-up report"


def page_head(title: str, style: str = "") -> str:
    """The opening of every self-contained page (each command's): its CSP, and the style with
    the page's own ``style`` after it."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            f"<title>{_e(title)}</title><style>{STYLE}{style}</style></head><body>\n")


def page_end() -> str:
    return f"<script>{SCRIPT}</script>\n</body></html>\n"


def render_html(report: Report, out: TextIO) -> None:
    results, findings, link, skipped, title = report.startups, report.findings, report.link, report.skipped, TITLE
    w = out.write
    w(page_head(title))
    w(f"<h1>{_e(title)}</h1>\n<p class=\"muted\">{len(results)} start-up(s) in "
      f"{len(by_trace(results))} trace(s).</p>\n")
    if skipped:
        w("<p class=\"partial\">Left out of this report: " + "; ".join(_e(s) for s in skipped) + "</p>\n")
    if len(results) > 1:
        _fleet(results, w)
    w("<h2>Findings</h2>\n")
    if not findings:
        w("<p>None.</p>\n")
    if findings and several_startups(results):  # each rule once; JSON keeps each start-up's own
        _grouped_findings(findings, len(results), w)
        findings = ()
    for number, f in enumerate(findings, start=1):
        level = "major" if f.share >= 0.3 else "notable" if f.share >= 0.1 else "minor"
        rank = f" (rank {f.rank})" if f.rank is not None else ""
        where = (f" <a class=\"muted\" href=\"#trace-{_e(f.trace_id)}\">trace {_e(f.trace_id[:8])}</a>"
                 if len(results) > 1 else "")
        w(f"<div class=\"finding {level}\" data-rule=\"{_e(f.rule)}\"><b>{number}. {_e(f.title)}</b>{_e(rank)}"
          f" <span class=\"muted\">{_e(saving_text(f))}</span>{where}<ul>")
        for line in f.evidence:
            w(f"<li>{_e(line)}</li>")
        w(f"<li><i>Lever:</i> {_e(f.lever)}</li>")
        if f.estimate:
            w(f"<li class=\"muted\">Estimate: {_e(f.estimate)}</li>")
        w("</ul></div>\n")
    for trace_id, group in by_trace(results).items():
        w(f"<div id=\"trace-{_e(trace_id)}\"></div>\n")
        for b in group:
            _startup(b, w, link)
    w(page_end())


SEEN_LINKS = 8  # start-ups linked per grouped finding


def _grouped_findings(findings, startups: int, w) -> None:
    """The text report's grouped findings (analyze/grouped_findings.py), each linking the
    start-ups it was seen in."""
    w(f"<p class=\"muted\">Over {startups} start-ups, each finding once (largest estimated saving first).</p>\n")
    for number, item in enumerate(group_findings(findings, startups), start=1):
        top = item.findings[0]
        level = "major" if top.share >= 0.3 else "notable" if top.share >= 0.1 else "minor"
        w(f"<div class=\"finding {level}\" data-rule=\"{_e(item.rule)}\" data-count=\"{item.count}\"><b>{number}. "
          f"{_e(item.title)}</b> <span class=\"muted\">in {item.count} of {startups} start-ups; "
          f"{_e(grouped_saving_text(item))}</span><ul>")
        for line in item.evidence:
            w(f"<li>{_e(line)}</li>")
        w(f"<li><i>Lever:</i> {_e(item.lever)}</li>")
        estimates = [f.estimate for f in item.findings if f.estimate]
        if estimates:
            w(f"<li class=\"muted\">Estimate: {_e(ranged(estimates)[0])}</li>")
        traces = list(dict.fromkeys(f.trace_id for f in item.findings))
        more = f" and {len(traces) - SEEN_LINKS} more" if len(traces) > SEEN_LINKS else ""
        w("<li class=\"muted\">Seen in: " + ", ".join(f"<a href=\"#trace-{_e(t)}\">trace {_e(t[:8])}</a>"
                                                     for t in traces[:SEEN_LINKS]) + f"{more}</li>")
        if not item.same_words:
            w(f"<li class=\"muted\">Words and figures of trace {_e(top.trace_id[:16])}, the largest saving; each "
              "start-up's own in --format json</li>")
        w("</ul></div>\n")


def _startup(b: Breakdown, w, link) -> None:
    total = b.duration_ns
    rank = f", rank {b.rank}" if b.rank is not None else ""
    state = b.end_description  # the one wording (analyze/end_reasons.py)
    w(f"<h2 id=\"startup-{_e(b.trace_id)}-{_e(b.root.span_id)}\">model.startup {_e(format_seconds(total))} "
      f"({state}{_e(rank)})</h2>\n<p>trace <code>{_e(b.trace_id)}</code>")
    if link is not None:
        w(f" &middot; <a class=\"trace-link\" href=\"{_e(link(b.trace_id))}\">open the trace</a>")
    w(f"<br>{_e(dominant_line(b))}</p>\n")
    interrupted = io.StringIO()  # where a killed start-up was, and its stalls (the text report's lines)
    render_killed_text(b, interrupted)
    render_stalls_text(b, interrupted)
    if interrupted.getvalue():
        w(f"<pre class=\"interrupted\">{_e(interrupted.getvalue())}</pre>\n")
    w("<h3>Phases</h3>\n<div class=\"chart\" role=\"img\" aria-label=\"phase breakdown\">")
    for p in b.phases:
        width = p.share_of(total) * 100
        if width > 0:
            w(f"<div style=\"width:{min(100.0, width):.3f}%;background:{phase_colour(p.phase)}\" "
              f"title=\"{_e(p.phase)} {_e(format_seconds(p.busy_ns))}\"></div>")
    if total:
        w(f"<div style=\"width:{b.unattributed_ns / total * 100:.3f}%;background:repeating-linear-gradient("
          f"45deg,#c0392b 0 2px,#fde0dc 2px 6px)\" title=\"unattributed\"></div>")
    w("</div>\n<table class=\"data phases\"><thead><tr><th>phase</th><th class=\"num\">time</th>"
      "<th class=\"num\">share</th><th></th><th class=\"num\">bytes</th><th class=\"num\">throughput</th>"
      "<th class=\"num\">spans</th></tr></thead><tbody>\n")
    own = shown_own_cost(b)  # the plugin's own work under the phases it landed in, as the text says it
    for p in b.phases:
        share = p.share_of(total)
        w(f"<tr><td><span style=\"color:{phase_colour(p.phase)}\">&#9632;</span> {_e(p.phase)}</td>"
          f"<td class=\"num\">{_e(format_seconds(p.busy_ns))}</td><td class=\"num\">{share * 100:.1f}%</td>"
          f"<td class=\"barcell\"><div style=\"width:{min(100.0, share * 100):.2f}%;background:"
          f"{phase_colour(p.phase)}\"></div></td><td class=\"num\">{_e(format_bytes(p.bytes or None))}</td>"
          f"<td class=\"num\">{_e(format_rate(p.throughput))}{' !' if p.above_bound else ''}</td>"
          f"<td class=\"num\">{p.spans}</td></tr>\n")
        if p.phase in own.by_phase:
            w(_own_cost_row(own.by_phase[p.phase], p.phase))
    ushare = b.unattributed_ns / total if total else 0.0
    w(f"<tr><td><i>unattributed</i></td><td class=\"num\">{_e(format_seconds(b.unattributed_ns))}</td>"
      f"<td class=\"num\">{ushare * 100:.1f}%</td><td class=\"barcell\"><div style=\"width:{ushare * 100:.2f}%;"
      "background:#c0392b\"></div></td><td></td><td></td><td></td></tr>\n")
    if semconv.UNATTRIBUTED in own.by_phase:
        w(_own_cost_row(own.by_phase[semconv.UNATTRIBUTED], semconv.UNATTRIBUTED))
    w("</tbody></table>\n")
    if own.total:
        w(f"<p class=\"own-cost\">{_e(own.total)}</p>\n")
    for warning in bandwidth_warnings(b):
        w(f"<p class=\"warning\">! {_e(warning)}</p>\n")
    render_explain_html(b, w)  # the outline, imports, compilations, captures
    w("<h3>Waterfall</h3>\n<div class=\"waterfall-box\">")
    w(svg_waterfall(b, standalone=False))
    w("</div>\n")
    render_downloads_html(b, w)  # what was fetched before it could be read
    if b.shards:
        w("<h3>Checkpoint files</h3>\n<table class=\"data shards\"><thead><tr><th>#</th><th>file</th>"
          "<th class=\"num\">size</th><th class=\"num\">time</th><th>cache</th>"
          "<th class=\"num\">read from storage</th></tr></thead><tbody>\n")
        for s in b.shards:
            state = "failed" if s.failed else s.state or "?"
            shown = f"failed ({s.error_type})" if s.failed and s.error_type else state
            w(f"<tr data-state=\"{_e(state)}\"><td>{'' if s.index is None else s.index}</td>"
              f"<td title=\"{_e(s.path or '')}\">{_e(s.name)}</td><td class=\"num\">{_e(format_bytes(s.size))}</td>"
              f"<td class=\"num\">{_e(format_seconds(s.duration_ns))}</td><td class=\"{_e(state)}\">{_e(shown)}</td>"
              f"<td class=\"num\">{'-' if s.failed else _e(format_bytes(s.read_bytes))}</td></tr>\n")
        w("</tbody></table>\n")
    lazy = lazy_lines(b)  # files still partly on storage at ready(), and their first use
    if lazy:
        w("<ul class=\"lazy-weights\">" + "".join(
            f"<li class=\"{'muted' if line.startswith(' ') else 'partial'}\">{_e(line.strip())}</li>" for line in lazy)
          + "</ul>\n")
    first = first_request_lines(b)  # the first request after ready(), and what it paid
    if first:
        w("<ul class=\"first-request\">" + "".join(
            f"<li class=\"{'muted' if line.startswith(' ') else ''}\">{_e(line.strip())}</li>" for line in first)
          + "</ul>\n")


def _own_cost_row(line: str, phase: str) -> str:
    """The text report's ``of which otel-coldstart: X`` under its phase's row."""
    return (f"<tr class=\"own-cost\" data-phase=\"{_e(phase)}\"><td colspan=\"7\" class=\"muted\">"
            f"&nbsp;&nbsp;&#8627; {_e(line)}</td></tr>\n")


def _fleet(results: Sequence[Breakdown], w) -> None:
    summary = summarize_group("", "all", results)
    w(f"<h2>Across {summary.count} start-ups</h2>\n")
    if summary.unready.count:
        w(f"<p class=\"partial not-ready\">not ready: {summary.unready.count} ({_e(summary.unready.describe())}): "
          "left out of the percentiles below</p>\n")
    if summary.total is None:
        return
    caveat = " (p95 of fewer than 20 start-ups: read it as the slowest seen, not a percentile)" \
        if summary.counted < 20 else ""
    w(f"<p>total p50 {_e(format_seconds(summary.total.p50_ns))}, p95 {_e(format_seconds(summary.total.p95_ns))}"
      f", max {_e(format_seconds(summary.total.max_ns))}{_e(caveat)}</p>\n")
    w("<table class=\"data fleet\"><thead><tr><th>phase</th><th class=\"num\">p50</th><th class=\"num\">p95</th>"
      "</tr></thead><tbody>\n")
    for name, q in sorted(summary.phases.items(), key=lambda kv: -kv[1].p95_ns):
        w(f"<tr><td>{_e(name)}</td><td class=\"num\">{_e(format_seconds(q.p50_ns))}</td>"
          f"<td class=\"num\">{_e(format_seconds(q.p95_ns))}</td></tr>\n")
    w("</tbody></table>\n")
    shards: dict[str, list] = defaultdict(list)
    for b in results:
        for s in b.read_shards:  # a failed read is no evidence of the cache
            shards[s.name].append(s)
    if shards:
        w("<h3>Cold rate per checkpoint file</h3>\n<table class=\"data coldrate\"><thead><tr><th>file</th>"
          "<th class=\"num\">reads</th><th class=\"num\">cold or partial</th><th class=\"num\">cold rate</th>"
          "<th class=\"num\">median time cold</th><th class=\"num\">median time warm</th></tr></thead><tbody>\n")
        for name, reads in sorted(shards.items(), key=lambda kv: (-sum(s.cold for s in kv[1]), kv[0])):
            cold = [s.duration_ns for s in reads if s.cold]
            warm = [s.duration_ns for s in reads if not s.cold]
            rate = len(cold) / len(reads)
            colour = STATE_COLOURS["cold"] if rate >= 0.5 else "inherit"
            w(f"<tr><td>{_e(name)}</td><td class=\"num\">{len(reads)}</td><td class=\"num\">{len(cold)}</td>"
              f"<td class=\"num\" style=\"color:{colour}\">{rate * 100:.0f}%</td>"
              f"<td class=\"num\">{_e(format_seconds(int(statistics.median(cold)))) if cold else '-'}</td>"
              f"<td class=\"num\">{_e(format_seconds(int(statistics.median(warm)))) if warm else '-'}</td></tr>\n")
        w("</tbody></table>\n")
