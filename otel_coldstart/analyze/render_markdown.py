"""Markdown for a review document: a table per start-up, the findings as a list."""

from __future__ import annotations

import io
from typing import TextIO

from .. import semconv
from .breakdown import Breakdown, bandwidth_warnings, by_trace
from .downloads import shard_notes
from .escape import markdown_code, markdown_fence, markdown_text as _cell  # everything here may come from a trace
from .first_request import lines as first_request_lines
from .grouped_findings import group as group_findings, several_startups
from .lazy import lines as lazy_lines
from .own_cost import shown as shown_own_cost
from .render import dominant_line, grouped_saving_text, saving_text
from .render_downloads import render_downloads_markdown
from .render_explain import render_explain_markdown
from .render_interrupted import render_killed_text, render_stalls_text, state_text
from .report import Report
from .shard_rows import shard_rows
from .units import format_bytes, format_rate, format_seconds


def render_markdown(report: Report, out: TextIO) -> None:
    findings = report.findings
    for trace_id, group in by_trace(report.startups).items():
        out.write(f"## Start-up trace {markdown_code(trace_id)}\n\n")
        if len(group) > 1:
            out.write("| rank | total | dominant phase | host |\n|---|---:|---|---|\n")
            for b in group:
                host = b.root.resource.get("host.name", "-")
                dominant = b.dominant.phase if b.dominant else "-"
                out.write(f"| {b.rank if b.rank is not None else '?'} | {format_seconds(b.duration_ns)} | "
                          f"{_cell(dominant)} | {_cell(host)} |\n")
            out.write("\n")
        for b in group:
            _startup(b, out)
    out.write("## Findings\n\n")
    if not findings:
        out.write("None.\n")
    if findings and several_startups(report.startups):  # each rule once; JSON keeps each start-up's own
        _grouped_findings(findings, len(report.startups), out)
        findings = ()
    for number, f in enumerate(findings, start=1):
        rank = f" (rank {f.rank})" if f.rank is not None else ""
        out.write(f"{number}. **{_cell(f.title)}**{_cell(rank)}, {saving_text(f)}\n")
        for line in f.evidence:
            out.write(f"   - {_cell(line)}\n")
        out.write(f"   - *Lever:* {_cell(f.lever)}\n")
    out.write("\n")


def _grouped_findings(findings, startups: int, out: TextIO) -> None:
    """The text report's grouped findings (analyze/grouped_findings.py) as a Markdown list."""
    out.write(f"Over {startups} start-ups, each finding once (largest estimated saving first):\n\n")
    for number, item in enumerate(group_findings(findings, startups), start=1):
        out.write(f"{number}. **{_cell(item.title)}**, in {item.count} of {startups} start-ups, "
                  f"{grouped_saving_text(item)}\n")
        for line in item.evidence:
            out.write(f"   - {_cell(line)}\n")
        out.write(f"   - *Lever:* {_cell(item.lever)}\n")
        if not item.same_words:
            out.write(f"   - *Words and figures of trace {markdown_code(item.findings[0].trace_id[:16])}, the "
                      "largest saving; each start-up's own in `--format json`*\n")


def _startup(b: Breakdown, out: TextIO) -> None:
    total = b.duration_ns
    rank = f", rank {b.rank}" if b.rank is not None else ""
    killed_state = state_text(b)
    if killed_state:
        state = f"**{killed_state}**"
    else:
        state = "ready" if b.ready else f"**{b.end_description.replace('NOT READY', 'not ready')}**"
    out.write(f"### model.startup: {format_seconds(total)} ({state}{rank})\n\n")
    where = io.StringIO()  # where a killed start-up was, and its stalls: the text report's lines
    render_killed_text(b, where)
    render_stalls_text(b, where)
    if where.getvalue():
        fence = markdown_fence(where.getvalue())  # longer than any backtick run from the trace
        out.write(fence + "\n" + where.getvalue() + fence + "\n\n")
    out.write("| phase | time | share | bytes | throughput | spans |\n|---|---:|---:|---:|---:|---:|\n")
    own = shown_own_cost(b)  # the plugin's own work under the phases it landed in, as the text says it
    for p in b.phases:
        out.write(f"| {_cell(p.phase)} | {format_seconds(p.busy_ns)} | {p.share_of(total) * 100:.1f}% | "
                  f"{format_bytes(p.bytes or None)} | {format_rate(p.throughput)}{' !' if p.above_bound else ''} | "
                  f"{p.spans} |\n")
        if p.phase in own.by_phase:
            out.write(f"| &nbsp;&nbsp;*{_cell(own.by_phase[p.phase])}* | | | | | |\n")
    share = b.unattributed_ns / total * 100 if total else 0.0
    out.write(f"| *unattributed* | {format_seconds(b.unattributed_ns)} | {share:.1f}% | | | |\n")
    if semconv.UNATTRIBUTED in own.by_phase:
        out.write(f"| &nbsp;&nbsp;*{_cell(own.by_phase[semconv.UNATTRIBUTED])}* | | | | | |\n")
    out.write("\n")
    if own.total:
        out.write(f"{_cell(own.total)}.\n\n")  # the product's name keeps its lower case
    out.write(_cell(dominant_line(b)[0].upper() + dominant_line(b)[1:]) + ".\n\n")
    for warning in bandwidth_warnings(b):
        out.write(f"**!** {_cell(warning)}.\n\n")
    render_explain_markdown(b, out)
    if b.parallelism > 1.05:
        out.write(f"Parallelism {b.parallelism:.2f}x (busy time across threads / wall time).\n\n")
    render_downloads_markdown(b, out)  # what was fetched before it could be read
    if b.shards:
        out.write("| shard | size | time | cache | read from storage |\n|---|---:|---:|---|---:|\n")
        listed, rest = shard_rows(b.shards)  # 2,000 files: the cold and slowest, then one line
        notes = shard_notes(b)  # shards whose file this start-up's download wrote
        for r in listed:
            name = r.name if r.folded else (r.path or "<bytes>").rsplit("/", 1)[-1]
            state = f"**failed** ({_cell(r.error_type or 'error')})" if r.failed else (r.state or "?")
            if r.folded and not r.failed:  # one row for many small files: their verdicts counted
                state += " (" + ", ".join(f"{n:,} {s}" for s, n in r.file_states) + ")"
            state += _cell(notes.get((r.path, r.start_ns), ""))
            read = "-" if r.failed else format_bytes(r.read_bytes)
            out.write(f"| {_cell(name)} | {format_bytes(r.size)} | {format_seconds(r.duration_ns)} | "
                      f"{state} | {read} |\n")
        if rest is not None:
            out.write(f"\n{_cell(rest.describe())} (every one in `--format json`).\n")
        out.write("\n")
    lazy = lazy_lines(b)  # files still partly on storage at ready(), and their first use
    for line in lazy:
        out.write(f"{'  - ' if line.startswith(' ') else '- '}{_cell(line.strip())}\n")
    if lazy:
        out.write("\n")
    first = first_request_lines(b)  # the first request after ready(), and what it paid
    for line in first:
        out.write(f"{'  - ' if line.startswith(' ') else '- '}{_cell(line.strip())}\n")
    if first:
        out.write("\n")
    if b.context:
        out.write("Context (spans that are not ours): " + "; ".join(
            f"{_cell(c.name)} {format_seconds(c.duration_ns)}"
            + (f" (contains {_cell(', '.join(c.phases_inside))})" if c.phases_inside else "")
            for c in b.context[:5]) + "\n\n")
