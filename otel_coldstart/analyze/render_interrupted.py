"""Text for start-ups that were killed or stalled (analyze/interrupted.py decides; this writes)."""

from __future__ import annotations

from typing import TextIO

from .. import semconv
from .breakdown import Breakdown
from .escape import terminal_text as _t  # names, files and stack frames come from the trace
from .units import format_bytes, format_seconds

# interrupted.py (three dataclasses, 2 ms to import) is imported only for a start-up that was
# killed or stalled: the summary printed after every ready() has neither.
WORKERS_SHOWN = 4  # worker threads printed per stall (the JSON report has them all)


def _has_stalls(breakdown: Breakdown) -> bool:
    return any(event.name == semconv.EVENT_STALL for span in (breakdown.root, *breakdown.spans)
               for event in span.events)


def state_text(breakdown: Breakdown) -> str | None:
    """The header's state for a killed start-up, None for one that ended."""
    return breakdown.end_description if breakdown.killed else None  # analyze/end_reasons.py


def render_killed_text(breakdown: Breakdown, out: TextIO) -> None:
    if not breakdown.killed:
        return
    from .interrupted import killed

    item = killed(breakdown)
    if item is not None:
        _killed(item, out)


def _killed(item, out: TextIO) -> None:
    where = f" during {_t(item.phase)}" if item.phase else ""
    running = ""
    if item.running is not None:
        running = f": in {_describe(item.running)} for {format_seconds(item.running.elapsed_ns)}"
    out.write(f"  killed (no end){where} at +{format_seconds(item.at_ns)}{running}\n")
    if item.open:
        chain = " > ".join(f"{_describe(o)} {format_seconds(o.elapsed_ns)}" for o in item.open)
        out.write(f"    open at the last sign of life: {chain}\n")
    if item.bytes_loaded or item.bytes_expected:
        of = ""
        if item.bytes_expected and item.bytes_loaded is not None:
            of = (f" of {format_bytes(item.bytes_expected)} "
                  f"({item.bytes_loaded / item.bytes_expected * 100:.0f}%{item.expected_words})")
        out.write(f"    checkpoint bytes loaded: {format_bytes(item.bytes_loaded or 0)}{of}\n")
    if item.expected_ready_ns is not None:
        # What the live estimate expected when it died: a startup probe that gives up before
        # this is what killed a start-up that was on its way.
        out.write(f"    expected ready at about +{format_seconds(item.expected_ready_ns)}: "
                  f"{format_seconds(int(item.remaining_s * 1e9))} more at its last sign of life "
                  f"(time-to-ready estimate from {item.remaining_history or '?'} earlier start-up(s))\n")
    elif item.remaining_history == 0:
        out.write("    no time-to-ready estimate: no earlier start-up of this service had reached ready()\n")


def _describe(item) -> str:
    if getattr(item, "module", None):
        return _t(f"import {item.module}")
    text = _t(item.name)
    if item.shard_index is not None or item.file:
        shard = f"#{item.shard_index} " if item.shard_index is not None else ""
        text += f" (shard {shard}{_t(item.file or '')})".replace(" )", ")")
    return text


def render_stalls_text(breakdown: Breakdown, out: TextIO) -> None:
    if not _has_stalls(breakdown):
        return
    from .interrupted import stalls

    for stall in stalls(breakdown):
        _stall(stall, out)


def _stall(stall, out: TextIO) -> None:
    idle = f"no progress for {format_seconds(int(stall.idle_s * 1e9))}" if stall.idle_s is not None else "no progress"
    phase = f" in {_t(stall.phase)}" if stall.phase else ""
    out.write(f"  stalled at +{format_seconds(stall.at_ns)}{phase} ({_t(stall.span_name)}): {idle}; "
              f"where it waited ({_t(stall.thread or 'thread ?')}, {stall.threads} thread(s) recorded):\n")
    for frame in stall.top_frames:
        out.write(f"      {_t(frame)}\n")
    if stall.workers:
        out.write("    it waited on other threads; in your code then:\n")
        for header, frames in stall.workers[:WORKERS_SHOWN]:
            out.write(f"      {_t(header)}:\n")
            for frame in frames:
                out.write(f"          {_t(frame)}\n")
        if len(stall.workers) > WORKERS_SHOWN:
            out.write(f"      ... and {len(stall.workers) - WORKERS_SHOWN} more thread(s) in your code\n")
