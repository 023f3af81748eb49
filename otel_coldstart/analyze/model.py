"""Format-free records that every reader produces and every analysis consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from .. import semconv

AttrValue = Union[str, bool, int, float, tuple]


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """An event of ours on a span (``coldstart.stall``); readers keep no others."""

    name: str
    time_ns: int
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span, whatever format it was read from.

    Ids are lowercase hex without prefix (32 chars for traces, 16 for spans); times are
    Unix nanoseconds. ``parent_id`` is None for a root (or a span whose parent link the
    source format could not express).
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    resource: Mapping[str, AttrValue] = field(default_factory=dict)
    status: str = "unset"  # unset | ok | error
    events: tuple[SpanEvent, ...] = ()  # only ours (names under "coldstart."), in time order

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def phase(self) -> str | None:
        value = self.attributes.get(semconv.PHASE)
        return value if isinstance(value, str) else None

    @property
    def is_root(self) -> bool:
        return self.name == semconv.SPAN_ROOT

    @property
    def is_aggregate(self) -> bool:
        return bool(self.attributes.get(semconv.AGGREGATE))

    @property
    def thread_id(self) -> int | None:
        value = self.attributes.get(semconv.THREAD_ID)
        return value if isinstance(value, int) else None

    @property
    def busy_ns(self) -> int:
        """Time this span covers on its own thread: aggregates carry the sum of their calls'
        durations (they are not contiguous); every other span covers its whole duration."""
        if self.is_aggregate:
            busy = self.attributes.get(semconv.BUSY_S)
            if isinstance(busy, (int, float)) and busy >= 0:
                if busy * 1e9 >= self.duration_ns:  # also catches a huge or infinite busy_s
                    return self.duration_ns
                return int(round(busy * 1e9))
        return self.duration_ns


@dataclass(frozen=True)
class Trace:
    trace_id: str
    spans: tuple[Span, ...]
