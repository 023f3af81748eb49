"""Format-free records that every reader produces and every analysis consumes."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import semconv

AttrValue = str | bool | int | float | tuple


_new = object.__new__


class Layout(dict):
    """One key layout of :class:`Attributes` (key -> position in the values), and where in it
    are the keys :class:`Span` reads at construction: found once per layout rather than by
    three lookups a span."""

    __slots__ = ("phase", "thread", "aggregate", "busy")

    def locate(self) -> None:
        self.phase = self.get(semconv.PHASE)
        self.thread = self.get(semconv.THREAD_ID)
        self.aggregate = self.get(semconv.AGGREGATE)
        self.busy = self.get(semconv.BUSY_S)


class Attributes(Mapping):
    """A read-only mapping of one span's attributes, stored as a tuple of values beside a key
    layout shared by every span with the same keys in the same order (a plugin writes the
    same keys on every span of a kind). 176 bytes for 11 attributes where a dict takes 464:
    on a million-span trace, the difference between fitting in 1 GB and not."""

    __slots__ = ("_index", "_values")
    _index: Layout
    _values: tuple
    _layouts: dict[tuple, Layout] = {}
    MAX_LAYOUTS = 4096  # a trace with ever-new key sets gets plain dicts beyond this

    @classmethod
    def build(cls, keys: tuple, values: tuple) -> Mapping[str, Any]:
        index = cls._layouts.get(keys)
        if index is None:
            keys = tuple(sys.intern(key) for key in keys)
            index = Layout((key, position) for position, key in enumerate(keys))
            if len(index) != len(keys) or len(cls._layouts) >= cls.MAX_LAYOUTS:
                return dict(zip(keys, values))  # a repeated key (the last wins) or too many layouts
            index.locate()
            cls._layouts[keys] = index
        attributes = _new(cls)  # not cls(...): a call through type and __init__ costs twice as much
        attributes._index = index
        attributes._values = values
        return attributes

    def get(self, key: str, default: Any = None) -> Any:
        position = self._index.get(key)
        return default if position is None else self._values[position]

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of the same attributes (built in C): for code that reads many keys
        of one span, where a dict's own get is faster than this mapping's."""
        return dict(zip(self._index, self._values))

    def __getitem__(self, key: str) -> Any:
        return self._values[self._index[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """An event of ours on a span (``coldstart.stall``); readers keep no others."""

    name: str
    time_ns: int
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)


@dataclass(slots=True)
class Span:
    """One finished span, whatever format it was read from.

    Ids are lowercase hex without prefix (32 chars for traces, 16 for spans); times are
    Unix nanoseconds. ``parent_id`` is None for a root (or a span whose parent link the
    source format could not express).

    Treated as immutable (a repair makes a new record with ``dataclasses.replace``) but not
    declared frozen: a frozen dataclass sets each field through ``object.__setattr__``, and
    building the records was then 5x slower (4.8 against 1.0 us a span; 2.6 s of the 10,000
    start-up fleet benchmark).
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
    # Read from the attributes once, at construction: the analysis asks for them millions of
    # times on a big trace (a property cost 1 s per million spans).
    phase: str | None = field(init=False, compare=False, repr=False)
    thread_id: int | None = field(init=False, compare=False, repr=False)
    aggregate_busy_ns: int | None = field(init=False, compare=False, repr=False)  # None: not an aggregate

    def __post_init__(self) -> None:
        if self.attributes.__class__ is Attributes:  # a reader's compact mapping (or a replace() of one)
            _derive_compact(self)
            return
        get = self.attributes.get
        phase, thread = get(semconv.PHASE), get(semconv.THREAD_ID)
        self.phase = phase if phase.__class__ is str else None
        self.thread_id = thread if thread.__class__ is int else None
        self.aggregate_busy_ns = (_busy_ns(get(semconv.BUSY_S), max(0, self.end_ns - self.start_ns))
                                  if get(semconv.AGGREGATE) else None)

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def is_root(self) -> bool:
        return self.name == semconv.SPAN_ROOT

    @property
    def is_aggregate(self) -> bool:
        return self.aggregate_busy_ns is not None  # set exactly when the aggregate attribute is true

    @property
    def busy_ns(self) -> int:
        """Time this span covers on its own thread: aggregates carry the sum of their calls'
        durations (they are not contiguous); every other span covers its whole duration."""
        busy = self.aggregate_busy_ns
        return max(0, self.end_ns - self.start_ns) if busy is None else busy


def _derive_compact(span: Span) -> None:
    """__post_init__'s rules, read at the positions the layout knows."""
    layout, values = span.attributes._index, span.attributes._values  # type: ignore[attr-defined]  # compact: Attributes
    span.phase = None if (at := layout.phase) is None or (value := values[at]).__class__ is not str else value
    span.thread_id = None if (at := layout.thread) is None or (value := values[at]).__class__ is not int else value
    if (at := layout.aggregate) is None or not values[at]:
        span.aggregate_busy_ns = None
        return
    duration = span.end_ns - span.start_ns
    duration = duration if duration > 0 else 0
    busy = None if (at := layout.busy) is None else values[at]
    if busy.__class__ is float and busy >= 0.0:  # the common case, inline: _busy_ns's rules for a float
        busy *= 1e9
        span.aggregate_busy_ns = duration if busy >= duration else round(busy)
    else:
        span.aggregate_busy_ns = _busy_ns(busy, duration)


def _busy_ns(busy: Any, duration: int) -> int:
    """An aggregate's ``busy_s`` in nanoseconds, no more than its duration; the duration when
    it has none that makes sense."""
    if isinstance(busy, (int, float)) and not isinstance(busy, bool) and busy >= 0:
        if busy * 1e9 >= duration:  # also catches a huge or infinite busy_s
            return duration
        return int(round(busy * 1e9))
    return duration
