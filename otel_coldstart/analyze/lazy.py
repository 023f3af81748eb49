"""Lazy weights: the checkpoint files a start-up left partly on storage at ready(), and what
the first requests read of them afterwards. Pure functions over a breakdown's file spans.

The plugin records, per file still mapped at ready() (its tensors backed by the file's pages),
the bytes out of the page cache then (``coldstart.lazy.unread_bytes``, on the file's final
settlement record), and follows those files after ready() (``coldstart.first_use`` records):
both are merged into the file's ``deserialize`` span by the record pipeline
(analyze/settlements.py). The summary line, the JSON rows, the HTML and Markdown lines and the
``lazy_weights`` finding are all made from :func:`lazy_files`.

The file's cold read rate (what its unread bytes would cost): the bytes its own span read from
storage (the file's storage figure less what came in after the span ended, whose time the span
does not hold) over the span's duration, where that is at least 1 MiB; else the same over the
start-up's other cold files; else the storage floor's cold read(2) rate when one was given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import semconv, verdicts
from .breakdown import Breakdown
from .model import Span
from .units import format_bytes, format_rate, format_seconds

MIN_RATE_BYTES = 1 << 20  # a span that read less from storage says nothing of a rate


@dataclass(frozen=True)
class FirstUse:
    """What the follow-up after ready() saw of one file (its latest record)."""

    bytes: int  # read from storage since ready()
    unread_bytes: int | None  # still out of the page cache at the latest sample
    first_s: float | None  # seconds after ready() of the sample that first saw a read
    last_s: float | None
    followed_s: float  # seconds after ready() of the latest sample
    bound_s: float | None
    end: str | None  # resident | bound | the process's end reason; None: still followed (or killed)


@dataclass(frozen=True)
class LazyFile:
    path: str | None
    size: int | None
    unread_bytes: int  # out of the page cache at ready(), the file still mapped
    rate: float | None  # bytes/s the estimate uses (see the module's docstring)
    rate_basis: str  # where that rate comes from, for the evidence
    first_use: FirstUse | None
    span: Span

    @property
    def name(self) -> str:
        return os.path.basename(self.path) if self.path else "<bytes>"

    @property
    def estimate_ns(self) -> int:
        """Time to read the unread bytes at the rate: what the first requests may pay."""
        return int(self.unread_bytes / self.rate * 1e9) if self.rate else 0


def _in_span_read(span: Span) -> tuple[int, int] | None:
    """(bytes read from storage during the span, its duration): its own read rate."""
    figure = verdicts.int_value(span.attributes, semconv.CACHE_STORAGE_READ_BYTES)
    if figure is None:
        return None
    after = verdicts.int_value(span.attributes, semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES) or 0
    in_span = figure - after
    if in_span < MIN_RATE_BYTES or span.duration_ns <= 0:
        return None
    return in_span, span.duration_ns


def _first_use(span: Span) -> FirstUse | None:
    attrs = span.attributes
    read = verdicts.int_value(span.attributes, semconv.FIRST_USE_BYTES)
    if read is None:
        return None
    end = attrs.get(semconv.FIRST_USE_END)
    return FirstUse(bytes=max(0, read), unread_bytes=verdicts.int_value(span.attributes, semconv.FIRST_USE_UNREAD_BYTES),
                    first_s=verdicts.number_value(attrs, semconv.FIRST_USE_FIRST_S),
                    last_s=verdicts.number_value(attrs, semconv.FIRST_USE_LAST_S),
                    followed_s=verdicts.number_value(attrs, semconv.FIRST_USE_FOLLOWED_S) or 0.0,
                    bound_s=verdicts.number_value(attrs, semconv.FIRST_USE_BOUND_S),
                    end=end if isinstance(end, str) else None)


def lazy_files(breakdown: Breakdown, floor=None) -> list[LazyFile]:
    """The files of a ready start-up still partly on storage at ready(), in read order."""
    if not breakdown.ready:
        return []
    files = [s for s in breakdown.spans if s.phase == semconv.PHASE_DESERIALIZE]
    unread = [(s, n) for s in files if (n := verdicts.int_value(s.attributes, semconv.LAZY_UNREAD_BYTES)) is not None
              and verdicts.is_lazily_unread(n, verdicts.int_value(s.attributes, semconv.FILE_SIZE))]
    if not unread:
        return []
    own = {s.span_id: _in_span_read(s) for s in files}
    cold = [r for r in own.values() if r is not None]  # files that read at least 1 MiB from storage in their span
    cold_bytes, cold_ns = sum(r[0] for r in cold), sum(r[1] for r in cold)
    floor_rate = getattr(floor, "cold_bytes_per_s", None)
    found = []
    for span, nbytes in sorted(unread, key=lambda item: item[0].start_ns):
        path = span.attributes.get(semconv.FILE_PATH)
        mine = own[span.span_id]
        if mine is not None:
            rate = mine[0] / (mine[1] / 1e9)
            basis = (f"the file's own cold read rate in this start-up, {format_rate(rate)} "
                     f"({format_bytes(mine[0])} from storage in {format_seconds(mine[1])})")
        elif cold_ns > 0:
            rate = cold_bytes / (cold_ns / 1e9)
            basis = f"the cold read rate of this start-up's other files, {format_rate(rate)}"
        elif floor_rate:
            rate = float(floor_rate)
            basis = f"the storage floor's cold read(2) rate, {format_rate(rate)}"
        else:
            rate, basis = None, "no cold read rate known (no cold file read at least 1 MiB in its span, no floor)"
        found.append(LazyFile(path=path if isinstance(path, str) else None, size=verdicts.int_value(span.attributes, semconv.FILE_SIZE),
                              unread_bytes=nbytes, rate=rate, rate_basis=basis, first_use=_first_use(span),
                              span=span))
    return found


def unread_line(item: LazyFile) -> str:
    """The summary's line for a file still partly on storage at ready()."""
    return (f"{format_bytes(item.unread_bytes)} of {item.name} not read yet: "
            "the first forward pass will read it from storage")


def first_use_line(item: LazyFile) -> str | None:
    """What the follow-up after ready() saw of the file, in one line; None when not followed."""
    seen = item.first_use
    if seen is None:
        return None
    if seen.bytes > 0 and seen.first_s is not None:
        when = (f"by {seen.last_s:.2f} s after ready()" if seen.last_s == seen.first_s
                else f"between {seen.first_s:.2f} s and {seen.last_s:.2f} s after ready()")
        text = f"first use: {format_bytes(seen.bytes)} of {item.name} read from storage {when}"
    else:
        text = f"first use: nothing of {item.name} read from storage in {seen.followed_s:.1f} s after ready()"
    left = seen.unread_bytes
    if seen.end == semconv.FIRST_USE_END_RESIDENT:
        return text + "; the whole file is in the page cache now"
    still = f"{format_bytes(left)} still on storage" if left is not None else "the rest unknown"
    if seen.end == semconv.FIRST_USE_END_BOUND:
        return text + f"; {still} when following stopped at {seen.followed_s:.0f} s"
    if seen.end is not None:
        return text + f"; {still} when the process ended ({seen.end}) at {seen.followed_s:.1f} s"
    return text + f"; {still} at the latest record ({seen.followed_s:.1f} s; still followed, or killed)"


def lines(breakdown: Breakdown) -> list[str]:
    """Every renderer's lines about lazy weights for one start-up."""
    out = []
    for item in lazy_files(breakdown):
        out.append(unread_line(item))
        seen = first_use_line(item)
        if seen is not None:
            out.append("  " + seen)
    return out
