"""A self-contained SVG waterfall of one start-up: one row per span, time left to right.
Checkpoint reads are labelled with their file name and coloured by cache state (cold red,
partial orange, warm light blue); other phases by phase; spans that are not ours grey;
unattributed time on the start-up thread hatched on the root row. Durations are written
on the bars, ticks fall on 1-2-5 steps, and a span too short to see is drawn at a minimum
width. Hover shows each span's name, phase, offset and duration (SVG <title>). No scripts,
fonts or links, so it renders the same in a browser, a review doc or a CI artifact.
Everything that comes from the trace is escaped.
"""

from __future__ import annotations

import html
from typing import TextIO

from .. import semconv
from .breakdown import Breakdown
from .report import Report
from .units import format_seconds
from .waterfall import FOREIGN, STATE_COLOURS, nice_step, phase_colour, rows, tick_label


def escape(text: str) -> str:
    # html.escape, not xml.sax.saxutils: that module imports urllib.request, http.client and
    # ssl (17 ms) into every analyzer process.
    return html.escape(text, quote=False)
ROW, LABEL_W, CHART_W, TOP, RIGHT_PAD = 18, 300, 900, 48, 80
MIN_BAR_W = 3.0  # a 20 us span on a 60 s axis still shows
CHAR_W = 6.2  # average width of an 11 px sans-serif character, for placing duration labels


def svg_waterfall(b: Breakdown, *, standalone: bool = True) -> str:
    parts: list[str] = []
    w = parts.append
    total = max(1, b.duration_ns)
    items, hidden = rows(b)

    def x(offset_ns: int) -> float:
        return LABEL_W + max(0.0, min(1.0, offset_ns / total)) * CHART_W

    legend_rows = 2
    height = TOP + ROW * len(items) + 26 + 16 * legend_rows
    width = LABEL_W + CHART_W + RIGHT_PAD
    rank = f", rank {b.rank}" if b.rank is not None else ""
    title = f"model.startup {format_seconds(b.duration_ns)}{rank}, trace {b.trace_id}"
    ns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    w(f'<svg{ns} class="waterfall" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
      f'font-family="sans-serif" font-size="11" role="img" aria-label="{html.escape(title, quote=True)}">\n')
    w('<defs><pattern id="gap" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
      '<rect width="6" height="6" fill="#fde0dc"/><rect width="2.5" height="6" fill="#c0392b"/></pattern></defs>\n')
    w(f'<rect width="{width}" height="{height}" fill="white"/>\n')
    w(f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title)}</text>\n')
    step = nice_step(total)
    tick = 0
    while tick <= total:
        tx = x(tick)
        anchor = "end" if tx > LABEL_W + CHART_W - 20 else "middle" if tick else "start"
        w(f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{TOP + ROW * len(items)}" stroke="#e5e5e5"/>'
          f'<text class="tick" x="{tx:.1f}" y="{TOP - 10}" text-anchor="{anchor}" fill="#555">'
          f'{escape(tick_label(tick, step, total))}</text>\n')
        tick += step
    for number, row in enumerate(items):
        y = TOP + number * ROW
        x0 = x(row.start_ns)
        bar_w = max(MIN_BAR_W, x(row.end_ns) - x0)
        x0 = min(x0, LABEL_W + CHART_W - bar_w)
        label = row.label  # already fits: cut in the middle by waterfall.rows
        state = f' data-state="{row.state}"' if row.state else ""
        w(f'<g class="row {row.kind}"{state}>')
        w(f'<text class="label" x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{escape(label)}</text>')
        w(f'<rect class="bar" x="{x0:.2f}" y="{y + 2}" width="{bar_w:.2f}" height="{ROW - 4}" fill="{row.colour}">'
          f'<title>{escape(row.tip)}</title></rect>')
        if number == 0:
            for gap in b.gaps:
                gx0, gx1 = x(gap.start_ns - b.root.start_ns), x(gap.end_ns - b.root.start_ns)
                if gx1 - gx0 >= 0.5:
                    w(f'<rect class="gap" x="{gx0:.2f}" y="{y + 2}" width="{max(2.0, gx1 - gx0):.2f}" '
                      f'height="{ROW - 4}" fill="url(#gap)" stroke="#c0392b" stroke-width="0.5">'
                      f'<title>unattributed {escape(format_seconds(gap.duration_ns))}</title></rect>')
        duration = format_seconds(row.duration_ns)
        text_w = CHAR_W * len(duration)
        if x0 + bar_w + 4 + text_w <= width - 4:
            w(f'<text class="duration" x="{x0 + bar_w + 4:.2f}" y="{y + 13}" fill="#333">{escape(duration)}</text>')
        elif bar_w > text_w + 6:
            w(f'<text class="duration" x="{x0 + bar_w - 3:.2f}" y="{y + 13}" text-anchor="end" fill="white">'
              f'{escape(duration)}</text>')
        else:
            w(f'<text class="duration" x="{x0 - 4:.2f}" y="{y + 13}" text-anchor="end" fill="#333">'
              f'{escape(duration)}</text>')
        w('</g>\n')
    legend_y = TOP + ROW * len(items) + 18
    swatches = [("cold read", STATE_COLOURS["cold"], None), ("partial read", STATE_COLOURS["partial"], None),
                ("warm read", STATE_COLOURS["warm"], None), (semconv.UNATTRIBUTED, None, "url(#gap)"),
                ("not ours", FOREIGN, None)]
    swatches += [(p, phase_colour(p), None) for p in sorted({r.phase for r in items if r.phase and r.kind == "phase"})]
    lx, ly = 8.0, legend_y
    for name, colour, fill in swatches:
        span_w = 24 + CHAR_W * len(name)
        if lx + span_w > width - 8:
            lx, ly = 8.0, ly + 16
        w(f'<rect x="{lx:.0f}" y="{ly}" width="12" height="10" fill="{fill or colour}" stroke="#999" stroke-width="0.5"/>'
          f'<text x="{lx + 16:.0f}" y="{ly + 9}">{escape(name)}</text>\n')
        lx += span_w
    if hidden:
        w(f'<text x="8" y="{ly + 26}" fill="#666">{hidden} shorter spans not shown</text>\n')
    parts[0] = parts[0].replace(f'height="{height}" viewBox="0 0 {width} {height}"',
                                f'height="{ly + 36}" viewBox="0 0 {width} {ly + 36}"')
    parts[2] = f'<rect width="{width}" height="{ly + 36}" fill="white"/>\n'
    w("</svg>\n")
    return "".join(parts)


def render_svg(report: Report, out: TextIO) -> None:
    """The waterfall of the report's one start-up (``analyze --waterfall`` writes one file per
    start-up)."""
    (startup,) = report.startups
    out.write(svg_waterfall(startup))
