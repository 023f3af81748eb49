"""What a command renders, and the one signature every renderer has.

A report is plain data, as pyinstrument's captured session is: :class:`Report` (what
``analyze`` found: start-ups, findings, where they came from, what was left out),
:class:`CompareReport`, :class:`CapacityReport` and :class:`WhatIfReport`. A renderer writes
one report in one format and computes nothing::

    render(report, out: TextIO) -> None

to a file object, so that a report of 300,000 shards streams instead of being built as one
string. Every format of every command is
in the one table of ``analyze/renderers.py`` (``RENDERERS[command][format]``); the renderers
themselves are ``analyze/render*.py``. ``capacity --prometheus`` (histograms, not start-ups)
writes its own text and JSON in ``cli/_prometheus.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from .breakdown import Breakdown
from .end_reasons import end_word
from .storage_floor import StorageFloor

Renderer = Callable[[Any, TextIO], None]


@dataclass(frozen=True)
class Budget:
    """``--budget``: the limits, and the start-ups that went over them."""

    limits_ns: Mapping[str, int]
    exceeded: Sequence[Any] = ()  # budgets.Violation


@dataclass(frozen=True)
class Report:
    """What ``analyze`` renders."""

    startups: Sequence[Breakdown]
    findings: Sequence[Any] = ()  # findings.Finding, largest saving first
    sources: Sequence[dict] = ()  # one per input: path or live source, format, spans, start-ups, warnings
    skipped: Sequence[str] = ()  # inputs left out ("FILE: line N: why")
    floor: StorageFloor | None = None
    budget: Budget | None = None
    link: Callable[[str], str] | None = None  # trace id -> URL of the trace, when one is known

    @classmethod
    def of(cls, startups: Sequence[Breakdown], floor: StorageFloor | None = None, **fields: Any) -> Report:
        """The report of ``startups`` with their findings (the printed summary's, a test's)."""
        from .findings import find

        return cls(startups, find(startups, floor), floor=floor, **fields)


# --- start-ups that did not reach ready() -----------------------------------------------


@dataclass(frozen=True)
class Unready:
    """The start-ups of a set that did not reach ready(), by how they ended: counted apart,
    and out of phase statistics unless asked (``--include-unready``): a start-up killed in
    deserialize never reached the phases after it, which would read as "faster"."""

    count: int = 0
    reasons: tuple[tuple[str, int], ...] = ()  # (end reason, start-ups), most first

    def describe(self) -> str:
        return ", ".join(f"{n} {reason}" for reason, n in self.reasons)


def split_unready(startups: Sequence[Breakdown], include: bool) -> tuple[list[Breakdown], Unready]:
    """The start-ups the statistics are made of (the ready ones, or all with ``include``)
    and the count of those that did not reach ready(), by end reason."""
    unready = [b for b in startups if not b.ready]
    reasons = Counter(end_word(b) for b in unready)  # semconv.END_*, in one word
    counted = Unready(len(unready), tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))))
    return (list(startups) if include else [b for b in startups if b.ready]), counted


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what it is, how many start-ups, which were counted."""

    label: str  # the path given
    startups: int  # all start-ups read
    unready: Unready = Unready()
    skipped: Sequence[str] = ()


@dataclass(frozen=True)
class CompareReport:
    """What ``compare`` renders: the comparison of the counted start-ups of each side."""

    comparison: Any  # compare.Comparison
    a: Side
    b: Side
    include_unready: bool = False


@dataclass(frozen=True)
class CapacityReport:
    """What ``capacity`` renders."""

    summaries: Sequence[Any]  # capacity.GroupSummary, all start-ups first
    provisioning_ns: int = 0
    skipped: Sequence[str] = ()
    include_unready: bool = False
    ramp_per_min: float | None = None  # a demand ramp (--ramp): the warm pool that covers the lead time


@dataclass(frozen=True)
class WhatIfReport:
    """What ``whatif`` renders: the projection, and the inputs left out."""

    result: Any  # whatif.WhatIf
    skipped: Sequence[str] = ()


@dataclass(frozen=True)
class ByReport:
    """What ``whatif --by`` and ``compare --by`` render: ``command``'s report per value of each
    attribute (different programs under one service name, told apart)."""

    command: str  # "whatif" or "compare": whose renderer writes each group
    groups: Sequence[tuple[str, str, str, Any]]  # (attribute, value, its start-ups in words, the command's report)
    notes: Sequence[str] = ()  # values left out, and why
