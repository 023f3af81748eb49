"""``compare`` in every format: text, Markdown, JSON (schema ``otel-coldstart.compare/3``) and
one self-contained HTML page in the analyze report's style. Each is a renderer
``render(report, out)`` over a :class:`~.report.CompareReport`; they compute nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TextIO

from .compare import ALPHA, FASTER, MIN_EFFECT_NS, MIN_EFFECT_RATIO, NOISE, SLOWER
from .escape import html_text, markdown_text, terminal_text
from .render import columns
from .report import CompareReport, Side
from .units import format_seconds

SCHEMA = "otel-coldstart.compare/3"
RULE = (f"verdict: Mann-Whitney U p < {ALPHA} and a median change of at least "
        f"{format_seconds(MIN_EFFECT_NS)} and {MIN_EFFECT_RATIO:.0%}")
HEADINGS = ("phase", "A median (IQR)", "B median (IQR)", "delta", "ratio", "p", "verdict")


def _side_text(name: str, side: Side, cache) -> str:
    return f"{name}: {side.label} ({side.startups} start-ups; {cache.describe()})"


def header(report: CompareReport) -> str:
    c = report.comparison
    return f"{_side_text('A', report.a, c.a_cache)}   {_side_text('B', report.b, c.b_cache)}"


def unready_line(report: CompareReport) -> str | None:
    """The start-ups that did not reach ready(), by end reason, and what was done with them."""
    sides = [(name, side) for name, side in (("A", report.a), ("B", report.b)) if side.unready.count]
    if not sides:
        return None
    counts = "; ".join(f"{name} {side.unready.count} ({side.unready.describe()})" for name, side in sides)
    what = ("counted in the statistics (--include-unready)" if report.include_unready else
            "left out of the statistics (--include-unready counts them)")
    return f"not ready: {counts}: {what}"


def notes(report: CompareReport) -> list[str]:
    """The lines a reader needs before the table: start-ups not ready, then the warnings."""
    line = unready_line(report)
    return ([line] if line else []) + [f"warning: {w}" for w in report.comparison.warnings]


def _ratio(row) -> str:
    return f"{row.ratio:.2f}x" if row.ratio is not None else "new"


def _spread(q) -> str:
    return f"{format_seconds(q[0])}-{format_seconds(q[1])}"


def _cells(row, name) -> list[str]:
    sign = "+" if row.delta_ns >= 0 else "-"
    return [name(row.phase), f"{format_seconds(row.a_ns)} ({_spread(row.a_iqr)})",
            f"{format_seconds(row.b_ns)} ({_spread(row.b_iqr)})", sign + format_seconds(abs(row.delta_ns)),
            _ratio(row), f"{row.p_value:.3f}", row.verdict]


def verdict_lines(report: CompareReport, name=terminal_text) -> list[str]:
    """What the table says, in words that agree with it: the phases beyond noise each way,
    and the total's own verdict, saying so when no single phase explains it."""
    c = report.comparison
    slower, faster = c.slower(), c.faster()
    lines = ["slower in B: " + ", ".join(f"{name(r.phase)} (+{format_seconds(r.delta_ns)})" for r in slower)
             if slower else "no phase got slower in B beyond noise"]
    if faster:
        lines.append("faster in B: " + ", ".join(f"{name(r.phase)} (-{format_seconds(-r.delta_ns)})" for r in faster))
    total = c.total
    change = ("+" if total.delta_ns >= 0 else "-") + format_seconds(abs(total.delta_ns))
    if total.verdict == NOISE:
        line = "total: within noise"
        if slower or faster:
            line += " (the phase changes above are small against the spread of the whole start-up)"
    else:
        line = f"total: {total.verdict} in B ({change}, p {total.p_value:.3f})"
        explained = slower if total.verdict == SLOWER else faster
        if not explained:
            line += (f"; no single phase is {total.verdict} beyond noise: the change is spread over several "
                     "phases or in unattributed time")
    lines.append(line)
    lines.append(RULE)
    return lines


def render_compare_text(report: CompareReport, out: TextIO) -> None:
    out.write(header(report) + "\n")
    for note in notes(report):
        out.write(f"{note}\n")
    rows = [list(HEADINGS)] + [_cells(r, terminal_text) for r in (report.comparison.total,) + report.comparison.rows]
    for line in columns(rows, right=set(_NUMERIC)):
        out.write(f"  {line}\n")
    out.write("\n" + "\n".join(verdict_lines(report)) + "\n")


def render_compare_markdown(report: CompareReport, out: TextIO) -> None:
    out.write(f"**{header(report)}**\n\n")  # the paths given on the command line, not trace text
    for note in notes(report):
        out.write(f"> {markdown_text(note)}\n\n")
    out.write("| " + " | ".join(HEADINGS) + " |\n|---|---:|---:|---:|---:|---:|---|\n")
    for row in (report.comparison.total,) + report.comparison.rows:
        out.write("| " + " | ".join(_cells(row, markdown_text)) + " |\n")
    out.write("\n" + "\n\n".join(verdict_lines(report, markdown_text)) + "\n")


def _side_document(side: Side, cache) -> dict:
    return {"path": side.label, "startups": side.startups, "cache": vars(cache),
            "not_ready": side.unready.count, "not_ready_reasons": dict(side.unready.reasons),
            "skipped": list(side.skipped)}


def compare_document(report: CompareReport) -> dict:
    c = report.comparison
    rows = (c.total,) + c.rows
    return {"schema": SCHEMA, "a": _side_document(report.a, c.a_cache), "b": _side_document(report.b, c.b_cache),
            "include_unready": report.include_unready, "counted": {"a": c.a_count, "b": c.b_count},
            "header": header(report), "rule": RULE, "warnings": list(c.warnings),
            "rows": [{"phase": r.phase, "a_s": r.a_ns / 1e9, "b_s": r.b_ns / 1e9,
                      "a_iqr_s": [v / 1e9 for v in r.a_iqr], "b_iqr_s": [v / 1e9 for v in r.b_iqr],
                      "delta_s": r.delta_ns / 1e9, "ratio": r.ratio, "p_value": round(r.p_value, 6),
                      "verdict": r.verdict} for r in rows],
            "slower": [r.phase for r in c.slower()], "faster": [r.phase for r in c.faster()],
            "total_verdict": c.total.verdict, "verdict_lines": verdict_lines(report, str)}


def render_compare_json(report: CompareReport, out: TextIO) -> None:
    json.dump(compare_document(report), out, indent=2, allow_nan=False)
    out.write("\n")


_VERDICT_CLASS = {SLOWER: "cold", FASTER: "warm", NOISE: "muted"}
_NUMERIC = (1, 2, 3, 4, 5)  # the columns of numbers: right-aligned


def _td(index: int, tag: str = "td") -> str:
    return f"<{tag} class=\"num\">" if index in _NUMERIC else f"<{tag}>"


def render_compare_html(report: CompareReport, out: TextIO) -> None:
    """The same self-contained page as ``analyze --format html`` (its CSP and style): the two
    sides, the notes, the table with a bar per side for each median, the verdict lines."""
    from .render_html import page_end, page_head
    from .waterfall import phase_colour

    e = html_text
    c = report.comparison
    w = out.write
    w(page_head("otel-coldstart compare"))
    w("<h1>Compare start-ups</h1>\n")
    for name, side, cache in (("A", report.a, c.a_cache), ("B", report.b, c.b_cache)):
        w(f"<p class=\"side\"><b>{name}</b>: <code>{e(side.label)}</code> {e(side.startups)} start-ups; "
          f"{e(cache.describe())}</p>\n")
    for note in notes(report):
        w(f"<p class=\"partial\">{e(note)}</p>\n")
    rows: Sequence = (c.total,) + c.rows
    scale = max((max(r.a_iqr[1], r.b_iqr[1], r.a_ns, r.b_ns) for r in rows), default=1) or 1
    w("<table class=\"data compare\"><thead><tr>" + "".join(f"{_td(i, 'th')}{e(h)}</th>" for i, h in enumerate(HEADINGS))
      + "<th>A / B</th></tr></thead><tbody>\n")
    for row in rows:
        cells = _cells(row, str)
        colour = "#555" if row.phase in ("total",) else phase_colour(row.phase)
        w(f"<tr data-verdict=\"{e(row.verdict)}\">" + "".join(f"{_td(i)}{e(v)}</td>" for i, v in enumerate(cells[:-1]))
          + f"<td class=\"{_VERDICT_CLASS[row.verdict]}\">{e(cells[-1])}</td>"
          f"<td class=\"barcell\"><div title=\"A {e(format_seconds(row.a_ns))}\" style=\"width:"
          f"{row.a_ns / scale * 100:.1f}%;background:{colour};opacity:.45\"></div><div title=\"B "
          f"{e(format_seconds(row.b_ns))}\" style=\"width:{row.b_ns / scale * 100:.1f}%;background:{colour}\">"
          "</div></td></tr>\n")
    w("</tbody></table>\n<ul class=\"verdict\">" + "".join(f"<li>{e(line)}</li>" for line in verdict_lines(report, str))
      + "</ul>\n")
    w(page_end())
