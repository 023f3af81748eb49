"""``whatif`` in every format: text, Markdown, JSON (schema ``otel-coldstart.whatif/1``) and
one self-contained HTML page. Each is a renderer ``render(report, out)`` over a
:class:`~.report.WhatIfReport` (analyze/whatif/ computes the projection); they compute nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from .escape import html_text, markdown_text, terminal_text
from .report import WhatIfReport
from .units import format_seconds

if TYPE_CHECKING:  # the registry of renderers imports this module: not every command needs the levers
    from .whatif import Projection, Quantiles, Summary, WhatIf

SCHEMA = "otel-coldstart.whatif/1"


def _s(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def _phases_doc(summary: Summary) -> dict:
    return {name: {"p50_s": _s(q.p50_ns), "p95_s": _s(q.p95_ns)} for name, q in summary.phases.items()}


def whatif_document(result: WhatIf, skipped: Sequence[str] = ()) -> dict:
    """The JSON document: ``baseline`` and ``levers`` as issue 27 gives them, plus the schema,
    the notes and what was left out."""
    base = result.baseline
    return {
        "schema": SCHEMA,
        "baseline": {"n": base.n, "p50_s": _s(base.total.p50_ns), "p95_s": _s(base.total.p95_ns),
                     "phases": _phases_doc(base)},
        "levers": [{
            "lever": p.lever,
            "p50_s": _s(p.summary.total.p50_ns) if p.summary else None,
            "p95_s": _s(p.summary.total.p95_ns) if p.summary else None,
            "saving_p50_s": _s(p.saving_p50_ns),
            "phases": _phases_doc(p.summary) if p.summary else {},
            "assumptions": list(p.assumptions),
            "not_estimated": p.not_estimated,
            "startups_changed": p.changed,
        } for p in result.levers],
        "notes": list(result.notes),
        "left_out": list(result.left_out),
        "skipped": list(skipped),
    }


def render_whatif_json(report: WhatIfReport, out: TextIO) -> None:
    json.dump(whatif_document(report.result, report.skipped), out, indent=2)
    out.write("\n")


def _saving(p: Projection, base: Summary) -> str:
    if p.saving_p50_ns is None:
        return "-"
    share = p.saving_p50_ns / base.total.p50_ns if base.total.p50_ns else 0.0
    if p.saving_p50_ns < 0:  # a p50 of projections can exceed the measured p50's start-up
        return f"none (p50 +{format_seconds(-p.saving_p50_ns)})"
    return f"{format_seconds(p.saving_p50_ns)} ({share * 100:.0f}%)"


def _by_p95(summary: Summary) -> list[tuple[str, Quantiles]]:
    return sorted(summary.phases.items(), key=lambda kv: (-kv[1].p95_ns, kv[0]))


def _changed_phases(p: Projection, base: Summary) -> list[tuple[str, Quantiles, Quantiles]]:
    """The phases a lever moved, largest move first (the rest are as measured)."""
    if p.summary is None:
        return []
    rows = [(name, q, p.summary.phases.get(name, q)) for name, q in base.phases.items()]
    moved = [r for r in rows if r[2] != r[1]]
    return sorted(moved, key=lambda r: (r[2].p50_ns - r[1].p50_ns, r[0]))


def _table(w, header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool, widths: Sequence[int],
           indent: str = "  ") -> None:
    """One table, as Markdown or as aligned text (the first column left, the others right)."""
    if markdown:
        w("| " + " | ".join(header) + " |\n|---|" + "---:|" * (len(header) - 1) + "\n")
        for row in rows:
            w("| " + " | ".join(row) + " |\n")
        return
    for row in [header, *rows]:
        line = indent + row[0].ljust(widths[0]) + "".join(c.rjust(n) for c, n in zip(row[1:], widths[1:]))
        w(line.rstrip() + "\n")


def render_whatif_text(report: WhatIfReport, out: TextIO) -> None:
    _text(report.result, out, markdown=False)


def render_whatif_markdown(report: WhatIfReport, out: TextIO) -> None:
    _text(report.result, out, markdown=True)


def _text(result: WhatIf, out: TextIO, markdown: bool) -> None:
    e = markdown_text if markdown else terminal_text
    base = result.baseline
    w = out.write
    headline = (f"{base.n} start-up(s) that reached ready(): total p50 {format_seconds(base.total.p50_ns)}, "
                f"p95 {format_seconds(base.total.p95_ns)}")
    w(f"## What if\n\n{headline}\n\n" if markdown else f"what if: {headline}\n")
    for note in result.notes:
        w(f"> {e(note)}\n\n" if markdown else f"  note: {e(note)}\n")
    for line in result.left_out:
        w(f"- left out: {e(line)}\n" if markdown else f"  left out: {e(line)}\n")
    w("\n" if result.left_out or not markdown else "")
    _table(w, ["baseline phase", "p50", "p95"],
           [[e(name), format_seconds(q.p50_ns), format_seconds(q.p95_ns)] for name, q in _by_p95(base)],
           markdown, (18, 10, 10))
    rows = [["baseline", format_seconds(base.total.p50_ns), format_seconds(base.total.p95_ns), ""]]
    for p in result.levers:
        if p.summary is None:
            rows.append([e(p.lever), "-", "-", "not estimated"])
        else:
            rows.append([e(p.lever), format_seconds(p.summary.total.p50_ns), format_seconds(p.summary.total.p95_ns),
                         _saving(p, base)])
    w("\n")
    _table(w, ["lever", "p50", "p95", "saving (p50)"], rows, markdown, (18, 10, 10, 16))
    for p in result.levers:
        w(f"\n### {e(p.lever)}\n\n" if markdown else f"\n{e(p.lever)}:\n")
        if p.summary is None:
            w(f"not estimated: {e(p.not_estimated)}\n\n" if markdown else f"  not estimated: {e(p.not_estimated)}\n")
        for sentence in p.assumptions:
            w(f"- {e(sentence)}\n" if markdown else f"  - {e(sentence)}\n")
        moved = _changed_phases(p, base)
        if moved:
            w("\n" if markdown else "")
            _table(w, ["phase", "p50", "projected p50", "p95", "projected p95"],
                   [[e(name), format_seconds(before.p50_ns), format_seconds(after.p50_ns),
                     format_seconds(before.p95_ns), format_seconds(after.p95_ns)] for name, before, after in moved],
                   markdown, (18, 10, 15, 10, 15), indent="    ")


def render_whatif_html(report: WhatIfReport, out: TextIO) -> None:
    from .render_html import page_head
    from .waterfall import phase_colour

    e = html_text
    result, skipped = report.result, report.skipped
    base = result.baseline
    w = out.write
    w(page_head("otel-coldstart what if", ".lever td:first-child{font-weight:bold} .bars{width:420px}"
                ".bars div{height:11px;margin:1px 0} .p95{opacity:.45}")
      + f"<h1>What if</h1>\n<p>{base.n} start-up(s) that reached ready(): total p50 "
      f"{e(format_seconds(base.total.p50_ns))}, p95 {e(format_seconds(base.total.p95_ns))}</p>\n")
    for note in result.notes:
        w(f"<p class=\"muted\">{e(note)}</p>\n")
    if result.left_out:
        w("<p class=\"partial\">Left out (did not reach ready()): " + "; ".join(e(x) for x in result.left_out)
          + "</p>\n")
    if skipped:
        w("<p class=\"partial\">Inputs left out: " + "; ".join(e(x) for x in skipped) + "</p>\n")
    scale = max([base.total.p95_ns] + [p.summary.total.p95_ns for p in result.levers if p.summary]) or 1
    w("<table class=\"data lever\"><thead><tr><th>lever</th><th class=\"num\">p50</th><th class=\"num\">p95</th>"
      "<th class=\"num\">saving (p50)</th><th>p50 / p95</th></tr></thead><tbody>\n")
    rows = [("baseline", base, "", None)] + [(p.lever, p.summary, _saving(p, base), p) for p in result.levers]
    for name, summary, saving, p in rows:
        if summary is None:
            w(f"<tr data-lever=\"{e(name)}\"><td>{e(name)}</td><td class=\"num\">-</td><td class=\"num\">-</td>"
              f"<td class=\"num\">not estimated</td><td class=\"muted\">{e(p.not_estimated)}</td></tr>\n")
            continue
        colour = "#888" if name == "baseline" else "#2b6a9e"
        w(f"<tr data-lever=\"{e(name)}\"><td>{e(name)}</td><td class=\"num\">{e(format_seconds(summary.total.p50_ns))}"
          f"</td><td class=\"num\">{e(format_seconds(summary.total.p95_ns))}</td><td class=\"num\">{e(saving)}</td>"
          f"<td class=\"bars\"><div style=\"width:{summary.total.p50_ns / scale * 100:.1f}%;background:{colour}\">"
          f"</div><div class=\"p95\" style=\"width:{summary.total.p95_ns / scale * 100:.1f}%;background:{colour}\">"
          "</div></td></tr>\n")
    w("</tbody></table>\n<h2>Baseline per phase</h2>\n<table class=\"data baseline\"><thead><tr><th>phase</th>"
      "<th class=\"num\">p50</th><th class=\"num\">p95</th></tr></thead><tbody>\n")
    for name, q in _by_p95(base):
        w(f"<tr><td>{e(name)}</td><td class=\"num\">{e(format_seconds(q.p50_ns))}</td><td class=\"num\">"
          f"{e(format_seconds(q.p95_ns))}</td></tr>\n")
    w("</tbody></table>\n")
    for p in result.levers:
        w(f"<h2 id=\"lever-{e(p.lever)}\">{e(p.lever)}</h2>\n")
        if p.summary is None:
            w(f"<p class=\"partial\">Not estimated: {e(p.not_estimated)}</p>\n")
        if p.assumptions:
            w("<p class=\"muted\">Assumptions:</p><ul>" + "".join(f"<li>{e(a)}</li>" for a in p.assumptions)
              + "</ul>\n")
        moved = _changed_phases(p, base)
        if not moved:
            continue
        top = max(before.p95_ns for _, before, _ in moved) or 1
        w("<table class=\"data\"><thead><tr><th>phase</th><th class=\"num\">p50</th><th class=\"num\">projected p50"
          "</th><th class=\"num\">p95</th><th class=\"num\">projected p95</th><th>measured / projected p50</th>"
          "</tr></thead><tbody>\n")
        for name, before, after in moved:
            colour = "#c0392b" if name == "unattributed" else phase_colour(name)
            w(f"<tr><td>{e(name)}</td><td class=\"num\">{e(format_seconds(before.p50_ns))}</td><td class=\"num\">"
              f"{e(format_seconds(after.p50_ns))}</td><td class=\"num\">{e(format_seconds(before.p95_ns))}</td>"
              f"<td class=\"num\">{e(format_seconds(after.p95_ns))}</td><td class=\"bars\"><div class=\"p95\" "
              f"style=\"width:{before.p50_ns / top * 100:.1f}%;background:{colour}\"></div><div style=\"width:"
              f"{after.p50_ns / top * 100:.1f}%;background:{colour}\"></div></td></tr>\n")
        w("</tbody></table>\n")
    w("</body></html>\n")
