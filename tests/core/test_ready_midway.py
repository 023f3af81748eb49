"""ready() from another thread while a phase runs (the ending matrix's ready-during cases):
the phase outlives the start-up, its finished children count once, and phases +
unattributed still add up to the start-up. Before, a child of a phase that ended after the
root was counted in its phase but left out of what covers the root's thread: 1.8x the
start-up with transformers' from_pretrained steps."""

from __future__ import annotations

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import compute_breakdown
from otel_coldstart.analyze.model import Span

T = "ab" * 16


def _span(span_id, parent, name, start, end, phase=None):
    attrs = {semconv.THREAD_ID: 1}
    if phase:
        attrs[semconv.PHASE] = phase
    return Span(T, span_id, parent, name, start, end, attrs)


def test_a_phase_open_at_ready_leaves_its_finished_children_counted_once():
    root = _span("0" * 16, None, semconv.SPAN_ROOT, 0, 100)
    outer = _span("1" * 16, root.span_id, "coldstart.load", 10, 150, "load")  # ends after ready()
    inner = _span("2" * 16, outer.span_id, "coldstart.build_model", 20, 40, "build_model")
    breakdown = compute_breakdown(root, [root, outer, inner])
    assert sum(p.busy_ns for p in breakdown.phases) + breakdown.unattributed_ns == root.duration_ns
    assert {p.phase: p.busy_ns for p in breakdown.phases} == {"build_model": 20}
