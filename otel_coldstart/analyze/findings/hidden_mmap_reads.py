"""Storage reads hiding inside copy or cast spans: with mmap (safetensors, torch.load
mmap=True) the checkpoint's pages are read on first touch, which is the copy or cast that
follows, so deserialize looks instant and the copy looks slow. The aggregates' own
``coldstart.io.read_bytes`` gives it away.

Estimate: the span's busy time in proportion to the share of its bytes read from storage
(the part that is storage, not the copy).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..units import format_bytes, format_seconds
from ._attrs import int_attr
from ._finding import Finding, claim

MIN_READ_BYTES = 1 << 20


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    hiding = [s for s in breakdown.spans
              if s.phase and s.phase not in (semconv.PHASE_DESERIALIZE, semconv.PHASE_DOWNLOAD)
              and int_attr(s, semconv.IO_READ_BYTES) >= MIN_READ_BYTES]
    if not hiding:
        return []
    read = sum(int_attr(s, semconv.IO_READ_BYTES) for s in hiding)
    phases = sorted({s.phase for s in hiding if s.phase})
    saving, claims = 0, []
    for span in hiding:
        moved = int_attr(span, semconv.BYTES)
        fraction = min(1.0, int_attr(span, semconv.IO_READ_BYTES) / moved) if moved else 1.0
        piece = int(span.busy_ns * fraction)
        saving += piece
        claims.append(claim(breakdown, piece, ("phase", span.phase)))
    return [Finding.about(
        breakdown, rule="hidden_mmap_reads", phase=phases[0],
        title=f"{format_bytes(read)} read from storage inside {', '.join(phases)} (mmap page faults)",
        evidence=[f"{len(hiding)} {'/'.join(phases)} span(s) read {format_bytes(read)} from storage while copying",
                  f"their busy time: {format_seconds(sum(s.busy_ns for s in hiding))}"],
        lever="this is storage time, not copy time: pre-warm the page cache or use local NVMe; "
              "or read eagerly so it shows as deserialize",
        saving_ns=saving, claims=claims, estimate="the spans' busy time in proportion to the bytes read from storage",
    )]
