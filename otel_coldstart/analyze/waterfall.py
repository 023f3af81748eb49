"""The layout of a start-up waterfall, shared by the SVG file and the HTML report: which
rows, with which labels and colours, and where the time axis puts its ticks. Pure: a
breakdown in, plain rows and numbers out; the renderers only draw them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .. import semconv
from .breakdown import Breakdown
from .explain import import_label
from .labels import distinct_labels, shorten
from .units import format_seconds

MAX_ROWS = 400  # the longest spans; a 1M-span trace still gives a readable picture
LABEL_CHARS = 46  # the label column (render_svg.LABEL_W): longer labels are cut in the middle
PALETTE = {"import": "#8c564b", "runtime_init": "#9467bd", "download": "#17becf", "deserialize": "#1f77b4",
           "allocate": "#bcbd22", "pin": "#e377c2", "h2d": "#ff7f0e", "d2h": "#ffbb78", "d2d": "#c49c94",
           "h2h": "#f7b6d2", "cast": "#2ca02c", "compile": "#7f7f7f", "graph_capture": "#ff9896",
           "warmup": "#98df8a"}
STATE_COLOURS = {semconv.CACHE_COLD: "#d62728", semconv.CACHE_PARTIAL: "#ff9f1c", semconv.CACHE_WARM: "#6baed6"}
FOREIGN = "#b0b0b0"


def phase_colour(phase: str | None) -> str:
    if phase is None:
        return FOREIGN
    if phase in PALETTE:
        return PALETTE[phase]
    digest = hashlib.sha1(phase.encode()).digest()  # user phases: stable colour per name
    return f"#{digest[0] // 2 + 64:02x}{digest[1] // 2 + 64:02x}{digest[2] // 2 + 64:02x}"


@dataclass(frozen=True)
class Row:
    label: str  # what the row is: a shard's file name and state, a phase, a foreign span's name (fits LABEL_CHARS)
    kind: str  # root | shard | phase | foreign
    phase: str | None
    state: str | None  # cold | partial | warm for checkpoint reads
    start_ns: int  # offset from the start-up's start
    end_ns: int
    colour: str
    tip: str

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


def rows(b: Breakdown) -> tuple[list[Row], int]:
    """The rows in time order (the root first) and how many short spans were left out."""
    origin = b.root.start_ns
    out = [Row("model.startup", "root", None, None, 0, b.duration_ns, "#d9d9d9",
               f"model.startup {format_seconds(b.duration_ns)}")]
    spans = sorted(b.spans, key=lambda s: -s.duration_ns)[:MAX_ROWS]
    hidden = len(b.spans) - len(spans)
    shards = {s.span_id: s for s in b.shards}  # spans of one start-up: one trace
    # Shard labels are cut in the middle against each other (labels.py): the shard number,
    # the end of the name and the state always show.
    names = sorted({s.name for s in b.shards})
    short = dict(zip(names, distinct_labels(names, LABEL_CHARS - len(" (partial)"))))
    items: list[Row] = []
    for span in spans:
        start, end = span.start_ns - origin, span.end_ns - origin
        shard = shards.get(span.span_id) if span.phase == semconv.PHASE_DESERIALIZE else None
        if shard is not None:
            state = "failed" if shard.failed else shard.state
            label = short[shard.name] + (f" ({state})" if state else "")
            colour = STATE_COLOURS.get(state or "", phase_colour(span.phase))
            tip = f"{shard.path or shard.name}: deserialize, " + (
                f"failed ({shard.error_type or 'error'})" if shard.failed else state or "cache state unknown")
            items.append(Row(label, "shard", span.phase, state, start, end, colour,
                             f"{tip}, +{format_seconds(start)} for {format_seconds(end - start)}"))
            continue
        name = span.name[len(semconv.SPAN_PREFIX):] if span.name.startswith(semconv.SPAN_PREFIX) else span.name
        imported = import_label(span)  # "import transformers.models.bert", not a column of "import"
        label = shorten(imported or (name if name == span.phase else f"{name} [{span.phase}]"), LABEL_CHARS)
        what = f"{imported} ({span.name})" if imported else f"{span.name} ({span.phase})"
        items.append(Row(label, "phase", span.phase, None, start, end, phase_colour(span.phase),
                         f"{what} +{format_seconds(start)} for {format_seconds(end - start)}"))
    for c in b.context:
        start, end = max(0, c.start_ns - origin), c.end_ns - origin
        items.append(Row(shorten(c.name, LABEL_CHARS), "foreign", None, None, start, end, FOREIGN,
                         f"{c.name} (not an otel-coldstart phase) for {format_seconds(c.duration_ns)}"))
    out += sorted(items, key=lambda r: (r.start_ns, -r.end_ns, r.label))
    return out, hidden


def nice_step(total_ns: int, target_ticks: int = 6) -> int:
    """A tick step of 1, 2 or 5 times a power of ten giving about ``target_ticks`` ticks."""
    if total_ns <= 0:
        return 1
    raw = total_ns / max(1, target_ticks)
    power = 1
    while power * 10 <= raw:
        power *= 10
    for factor in (1, 2, 5, 10):
        if power * factor >= raw:
            return power * factor
    return power * 10  # pragma: no cover


def tick_label(ns: int, step_ns: int, total_ns: int) -> str:
    """``0``, ``200 ms``, ``1.5 s``: one unit per axis (from the total), as many decimals
    as the step needs."""
    if ns == 0:
        return "0"
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):  # noqa: B007 - used after
        if total_ns >= size:
            break
    else:
        return f"{ns} ns"
    decimals = 0
    while decimals < 3 and step_ns % size * 10**decimals % size:
        decimals += 1
    return f"{ns / size:.{decimals}f} {unit}"
