"""The plugin's own cost in a start-up, as its root span reports it (otel_coldstart/own_cost.py):
the whole, and the part of it inside each phase, so that a report never charges the plugin's
work to the user's load.

A trace without ``coldstart.own_cost_s`` (written before it existed, or a start-up killed
before its end) still has the set-up on its import span (``coldstart.import.own_s``).
"""

from __future__ import annotations

from typing import NamedTuple

from .. import semconv
from .breakdown import Breakdown
from .findings.dominant_phase import plugin_import_ns
from .units import format_seconds

SHOWN_FROM_S = 0.0005  # "of which otel-coldstart" under a phase from half a millisecond


class OwnCost(NamedTuple):
    total_s: float | None  # None: the start-up did not report it
    setup_s: float | None
    threads_cpu_s: float | None
    by_phase_s: dict[str, float]  # the plugin's work on the host's threads, by the phase it landed in


def _seconds(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return None  # absent, or a hostile trace's NaN, negative or text
    return float(value)


def own_cost(breakdown: Breakdown) -> OwnCost:
    attrs = breakdown.root.attributes
    by_phase: dict[str, float] = {}
    for key, value in attrs.items():
        if key.startswith(semconv.OWN_COST_PHASE_PREFIX) and key.endswith("_s"):
            seconds = _seconds(value)
            if seconds is not None:
                by_phase[key[len(semconv.OWN_COST_PHASE_PREFIX):-2]] = seconds
    setup = _seconds(attrs.get(semconv.OWN_COST_SETUP_S))
    if setup is None:
        imported_ns = plugin_import_ns(breakdown)
        setup = imported_ns / 1e9 if imported_ns else None
    if setup is not None:
        by_phase[semconv.PHASE_IMPORT] = by_phase.get(semconv.PHASE_IMPORT, 0.0) + setup
    return OwnCost(_seconds(attrs.get(semconv.OWN_COST_S)), setup,
                   _seconds(attrs.get(semconv.OWN_COST_THREADS_CPU_S)), by_phase)


def own_cost_document(breakdown: Breakdown) -> dict:
    """The JSON report's fields: ``own_cost_s`` (None where the start-up did not report it) and
    its parts."""
    cost = own_cost(breakdown)
    return {"own_cost_s": cost.total_s,
            "own_cost": {"setup_s": cost.setup_s, "threads_cpu_s": cost.threads_cpu_s,
                         "by_phase_s": dict(sorted(cost.by_phase_s.items()))}}


def phase_line(cost: OwnCost, phase: str, phase_busy_s: float) -> str | None:
    """``of which otel-coldstart: X`` for a phase the plugin's work landed in, or None. Only
    for a start-up that measured its own cost (an older trace's import share is not said)."""
    seconds = cost.by_phase_s.get(phase)
    if cost.total_s is None or seconds is None or seconds < SHOWN_FROM_S:
        return None
    seconds = min(seconds, phase_busy_s) if phase_busy_s > 0 else seconds
    share = f" ({seconds / phase_busy_s * 100:.0f}% of it)" if phase_busy_s > 0 else ""
    return f"of which otel-coldstart: {_format(seconds)}{share}"


def total_line(cost: OwnCost, duration_s: float) -> str | None:
    if cost.total_s is None:
        return None
    parts = []
    if cost.setup_s is not None:
        parts.append(f"set-up {_format(cost.setup_s)}")
    hooks = sum(cost.by_phase_s.values()) - (cost.setup_s or 0.0)  # patching inside imports included
    if hooks > 0:
        parts.append(f"hooks {_format(hooks)}")
    if cost.threads_cpu_s:
        parts.append(f"its threads' CPU {_format(cost.threads_cpu_s)}")
    share = f", {cost.total_s / duration_s * 100:.1f}% of the start-up" if duration_s > 0 else ""
    return f"otel-coldstart's own cost: {_format(cost.total_s)}{share}" + (f" ({', '.join(parts)})" if parts else "")


class ShownOwnCost(NamedTuple):
    """What every human report says of the plugin's own cost (text, Markdown, HTML): the
    ``of which otel-coldstart`` line under each phase it landed in (unattributed included),
    and the whole. Computed once here so the three reports cannot disagree."""
    by_phase: dict[str, str]  # phase (or "unattributed") -> its "of which otel-coldstart: X" line
    total: str | None  # "otel-coldstart's own cost: X, Y% of the start-up (...)", or None


def shown(breakdown: Breakdown) -> ShownOwnCost:
    cost = own_cost(breakdown)
    busy = {item.phase: item.busy_ns / 1e9 for item in breakdown.phases}
    busy[semconv.UNATTRIBUTED] = breakdown.unattributed_ns / 1e9  # the plugin's work between its spans
    lines = {}
    for phase, phase_busy_s in busy.items():
        line = phase_line(cost, phase, phase_busy_s)
        if line:
            lines[phase] = line
    return ShownOwnCost(lines, total_line(cost, breakdown.duration_ns / 1e9))


def _format(seconds: float) -> str:
    return format_seconds(int(seconds * 1e9))
