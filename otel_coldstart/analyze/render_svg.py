"""A self-contained SVG waterfall of one start-up: one row per span, time left to right,
coloured by phase; spans that are not ours in grey; gaps (unattributed) hatched on the root
row. Hover shows each span's name, phase, offset and duration (SVG <title>). No scripts,
fonts or links, so it renders the same in a browser, a review doc or a CI artifact.
"""

from __future__ import annotations

import hashlib
from typing import TextIO
from xml.sax.saxutils import escape

from .breakdown import Breakdown
from .units import format_seconds

MAX_ROWS = 400  # the longest spans; a 1M-span trace still gives a readable picture
ROW, LABEL_W, CHART_W, TOP = 16, 260, 900, 40
PALETTE = {"import": "#8c564b", "runtime_init": "#9467bd", "download": "#17becf", "deserialize": "#1f77b4",
           "allocate": "#bcbd22", "pin": "#e377c2", "h2d": "#ff7f0e", "d2h": "#ffbb78", "d2d": "#c49c94",
           "h2h": "#f7b6d2", "cast": "#2ca02c", "compile": "#d62728", "graph_capture": "#ff9896",
           "warmup": "#98df8a"}


def phase_colour(phase: str | None) -> str:
    if phase is None:
        return "#b0b0b0"
    if phase in PALETTE:
        return PALETTE[phase]
    digest = hashlib.sha1(phase.encode()).digest()  # user phases: stable colour per name
    return f"#{digest[0] // 2 + 64:02x}{digest[1] // 2 + 64:02x}{digest[2] // 2 + 64:02x}"


def render_svg(b: Breakdown, out: TextIO) -> None:
    origin, total = b.root.start_ns, max(1, b.duration_ns)
    rows = [(b.root.name, None, b.root.start_ns, b.root.end_ns, "model.startup")]
    spans = sorted(b.spans, key=lambda s: -s.duration_ns)[:MAX_ROWS]
    hidden = len(b.spans) - len(spans)
    items = [(s.name, s.phase, s.start_ns, s.end_ns, s.phase or "") for s in spans]
    items += [(c.name, None, c.start_ns, c.end_ns, "not ours") for c in b.context]
    rows += sorted(items, key=lambda r: (r[2], -r[3]))

    def x(ns: int) -> float:
        return LABEL_W + max(0.0, min(1.0, (ns - origin) / total)) * CHART_W

    phases = sorted({r[1] for r in rows if r[1]})
    height = TOP + ROW * len(rows) + 60
    width = LABEL_W + CHART_W + 20
    rank = f", rank {b.rank}" if b.rank is not None else ""
    title = f"model.startup {format_seconds(b.duration_ns)}{rank}, trace {b.trace_id}"
    w = out.write
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
      f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">\n')
    w('<defs><pattern id="gap" width="6" height="6" patternUnits="userSpaceOnUse" '
      'patternTransform="rotate(45)"><rect width="3" height="6" fill="#e0a0a0"/></pattern></defs>\n')
    w(f'<rect width="{width}" height="{height}" fill="white"/>\n')
    w(f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title)}</text>\n')
    for tick in range(11):
        tx = LABEL_W + CHART_W * tick / 10
        w(f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{height - 30}" stroke="#eee"/>'
          f'<text x="{tx:.1f}" y="{TOP - 8}" text-anchor="middle" fill="#666">'
          f'{escape(format_seconds(total * tick // 10))}</text>\n')
    for number, (name, phase, start, end, kind) in enumerate(rows):
        y = TOP + number * ROW
        x0, x1 = x(start), x(end)
        label = name if not kind or kind in name else f"{name} [{kind}]"
        tip = f"{name} ({kind}) +{format_seconds(start - origin)} for {format_seconds(max(0, end - start))}"
        w(f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end">{escape(label[:42])}</text>')
        w(f'<rect x="{x0:.2f}" y="{y + 2}" width="{max(1.0, x1 - x0):.2f}" height="{ROW - 4}" '
          f'fill="{phase_colour(phase) if number else "#444"}"><title>{escape(tip)}</title></rect>\n')
        if number == 0:
            for gap in b.gaps:
                gx0, gx1 = x(gap.start_ns), x(gap.end_ns)
                if gx1 - gx0 >= 1:
                    w(f'<rect x="{gx0:.2f}" y="{y + 2}" width="{gx1 - gx0:.2f}" height="{ROW - 4}" '
                      f'fill="url(#gap)"><title>unattributed {escape(format_seconds(gap.duration_ns))}'
                      f'</title></rect>\n')
    legend_y, legend_x = height - 40, 8.0
    for phase in phases:  # one swatch per phase present, in name order
        w(f'<rect x="{legend_x:.0f}" y="{legend_y}" width="10" height="10" fill="{phase_colour(phase)}"/>'
          f'<text x="{legend_x + 14:.0f}" y="{legend_y + 9}">{escape(phase)}</text>\n')
        legend_x += 24 + 7 * len(phase)
    note = f"{hidden} shorter spans not shown; " if hidden else ""
    w(f'<text x="8" y="{height - 12}" fill="#666">{escape(note)}hatched: unattributed time on the '
      f'start-up thread; grey: spans that are not otel-coldstart phases</text>\n')
    w("</svg>\n")
