"""Many CUDA graph captures, or captures that take a large share of the start-up: each batch
size is captured separately, and servers capture dozens by default (vLLM: one per
``cudagraph_capture_sizes`` entry, per piece when graphs are piecewise), paid on every cold
start. The evidence names the slowest sizes where their times were recorded
(``coldstart.graph.capture_times_s``).

Estimate: the ``fewer-captures`` lever's projection (analyze/whatif/fewer_captures.py, the
same figure ``whatif --lever fewer-captures`` gives): the recorded time of the captures of
the sizes beyond one per power of two up to the largest; not estimated without sizes.
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ..explain import capture_summary
from ..units import format_seconds
from ..whatif import FEWER_CAPTURES
from ._finding import Finding, claim, share_text
from ._levers import lever_saving

MIN_CAPTURES = 8
MIN_SHARE = 0.1  # fewer captures still make a finding when they take this share of the start-up


def _sizes(spans) -> list[int]:
    sizes: set[int] = set()
    for span in spans:
        many = span.attributes.get(semconv.GRAPH_BATCH_SIZES)
        values = list(many) if isinstance(many, (tuple, list)) else []
        values.append(span.attributes.get(semconv.GRAPH_BATCH_SIZE))
        sizes.update(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0)
    return sorted(sizes)


def check(breakdown: Breakdown, floor=None, given=None) -> list[Finding]:
    spans = [s for s in breakdown.spans if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    count = verdicts.capture_count(spans)  # the metric's count too
    phase = breakdown.phase(semconv.PHASE_GRAPH_CAPTURE)
    busy = phase.busy_ns if phase else sum(s.busy_ns for s in spans)
    total = breakdown.duration_ns
    if count == 0 or (count < MIN_CAPTURES and (total <= 0 or busy < MIN_SHARE * total)):
        return []
    sizes = _sizes(spans)
    evidence = [f"{count} graph captures in {format_seconds(busy)} ({format_seconds(busy // count)} each on average), "
                f"{share_text(busy, total)}"]
    capture_s = [verdicts.number_value(s.attributes, semconv.GRAPH_MAX_CAPTURE_S) for s in spans]
    longest = max((seconds for seconds in capture_s if seconds is not None), default=None)
    if longest is not None:
        evidence.append(f"longest capture {format_seconds(int(longest * 1e9))}")
    summary = capture_summary(breakdown)
    if summary is not None and summary.sizes:
        evidence.append("slowest sizes: " + ", ".join(f"{size} ({format_seconds(ns)})"
                                                      for size, ns in summary.slowest(5)))
    if sizes:
        shown = ", ".join(map(str, sizes[:12])) + (" ..." if len(sizes) > 12 else "")
        evidence.append(f"batch sizes: {shown}")
    projected = lever_saving(breakdown, FEWER_CAPTURES, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="graph_captures", phase=semconv.PHASE_GRAPH_CAPTURE,
        title=f"{count} CUDA graph capture{'' if count == 1 else 's'} at start-up: {format_seconds(busy)}, "
              f"{share_text(busy, total)}",
        evidence=evidence,
        lever="capture fewer batch sizes (powers of two, pad requests up; vLLM: a shorter "
              "compilation_config.cudagraph_capture_sizes, or a lower max_cudagraph_capture_size), capture "
              "piecewise graphs instead of full ones or the reverse, whichever captures fewer "
              "(vLLM: compilation_config.cudagraph_mode), or capture lazily on first use",
        saving_ns=saving, share=busy / breakdown.duration_ns if breakdown.duration_ns else 0.0,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_GRAPH_CAPTURE))] if saving else [],
        estimate=projected.estimate,
    )]
