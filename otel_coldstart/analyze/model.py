"""Format-free records that every reader produces and every analysis consumes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Union

from .. import semconv

AttrValue = Union[str, bool, int, float, tuple]


class Attributes(Mapping):
    """A read-only mapping of one span's attributes, stored as a tuple of values beside a key
    layout shared by every span with the same keys in the same order (a plugin writes the
    same keys on every span of a kind). 176 bytes for 11 attributes where a dict takes 464:
    on a million-span trace, the difference between fitting in 1 GB and not."""

    __slots__ = ("_index", "_values")
    _layouts: dict[tuple, dict[str, int]] = {}
    MAX_LAYOUTS = 4096  # a trace with ever-new key sets gets plain dicts beyond this

    def __init__(self, index: dict[str, int], values: tuple) -> None:
        self._index = index
        self._values = values

    @classmethod
    def build(cls, keys: tuple, values: tuple) -> Mapping[str, Any]:
        index = cls._layouts.get(keys)
        if index is None:
            keys = tuple(sys.intern(key) for key in keys)
            index = {key: position for position, key in enumerate(keys)}
            if len(index) != len(keys) or len(cls._layouts) >= cls.MAX_LAYOUTS:
                return dict(zip(keys, values))  # a repeated key (the last wins) or too many layouts
            cls._layouts[keys] = index
        return cls(index, values)

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
        attributes = self.attributes
        if attributes.__class__ is Attributes:  # the reader's compact mapping: skip the method calls
            index, values = attributes._index, attributes._values
            position = index.get(semconv.PHASE)
            phase = None if position is None else values[position]
            position = index.get(semconv.THREAD_ID)
            thread = None if position is None else values[position]
            position = index.get(semconv.AGGREGATE)
            aggregate = None if position is None else values[position]
        else:
            phase = attributes.get(semconv.PHASE)
            thread = attributes.get(semconv.THREAD_ID)
            aggregate = attributes.get(semconv.AGGREGATE)
        self.phase = phase if phase.__class__ is str else None
        self.thread_id = thread if thread.__class__ is int else None
        self.aggregate_busy_ns = self._aggregate_busy_ns() if aggregate else None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def is_root(self) -> bool:
        return self.name == semconv.SPAN_ROOT

    @property
    def is_aggregate(self) -> bool:
        return bool(self.attributes.get(semconv.AGGREGATE))

    @property
    def busy_ns(self) -> int:
        """Time this span covers on its own thread: aggregates carry the sum of their calls'
        durations (they are not contiguous); every other span covers its whole duration."""
        busy = self.aggregate_busy_ns
        return max(0, self.end_ns - self.start_ns) if busy is None else busy

    def _aggregate_busy_ns(self) -> int:
        busy = self.attributes.get(semconv.BUSY_S)
        if isinstance(busy, (int, float)) and not isinstance(busy, bool) and busy >= 0:
            if busy * 1e9 >= self.duration_ns:  # also catches a huge or infinite busy_s
                return self.duration_ns
            return int(round(busy * 1e9))
        return self.duration_ns
