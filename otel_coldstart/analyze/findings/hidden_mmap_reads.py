"""Storage reads hiding inside copy or cast spans: with mmap (safetensors, torch.load
mmap=True) the checkpoint's pages are read on first touch, which is the copy or cast that
follows, so deserialize looks instant and the copy looks slow. The aggregates' own
``coldstart.io.read_bytes`` gives it away.

Estimate: the ``prewarm`` lever's projection for these spans (analyze/whatif/prewarm.py: their
bytes from storage at the start-up's own cold read rate, else the floor's, else the other
start-ups'; the copy or cast itself stays): the part of ``whatif --lever prewarm`` that is not
the cold files' own (``cold_cache`` states that part). Not estimated without a cold rate.
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ..units import format_bytes, format_seconds
from ..whatif import PREWARM
from ._finding import Finding, claim
from ._levers import cold_file_spans, lever_saving

MIN_READ_BYTES = 1 << 20


def check(breakdown: Breakdown, floor=None, given=None) -> list[Finding]:
    hiding = [s for s in breakdown.spans
              if s.phase and s.phase not in (semconv.PHASE_DESERIALIZE, semconv.PHASE_DOWNLOAD)
              and verdicts.positive_int(s.attributes, semconv.IO_READ_BYTES) >= MIN_READ_BYTES]
    if not hiding:
        return []
    read = sum(verdicts.positive_int(s.attributes, semconv.IO_READ_BYTES) for s in hiding)
    phases = sorted({s.phase for s in hiding if s.phase})
    projected = lever_saving(breakdown, PREWARM, floor, given)
    in_files = cold_file_spans(breakdown)  # cold_cache's part of the same projection
    saving, claims = 0, []
    for span in hiding:
        piece = 0 if span.span_id in in_files else projected.part([span.span_id])
        saving += piece
        claims.append(claim(breakdown, piece, ("phase", span.phase)))
    return [Finding.about(
        breakdown, rule="hidden_mmap_reads", phase=phases[0],
        title=f"{format_bytes(read)} read from storage inside {', '.join(phases)} (mmap page faults)",
        evidence=[f"{len(hiding)} {'/'.join(phases)} span(s) read {format_bytes(read)} from storage while copying",
                  f"their busy time: {format_seconds(sum(s.busy_ns for s in hiding))}"],
        lever="this is storage time, not copy time: pre-warm the page cache or use local NVMe; "
              "or read eagerly so it shows as deserialize",
        saving_ns=saving, claims=claims if saving else [],
        estimate=(f"the prewarm lever's projection for these spans: {'; '.join(projected.assumptions)}" if saving
                  else projected.estimate if projected.ns is None or not projected.applies
                  else "no saving: prewarm takes nothing off these spans"),
    )]
