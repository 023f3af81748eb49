"""Start-ups from the rows a SQL engine reduced them to (sources/clickhouse_sql.py): the
same slim records (Breakdown.slim) that compare and capacity read from trace files, so
their rules (verdicts, dominant phase, lead time, warm pool) run on them unchanged.

Pure: rows in, records out. A row carries the root (times, status, attributes and resource
as text: the exporter's Map columns keep no types, so they are typed back by their text),
each phase's busy time and span count, unattributed time and the cache verdict."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

from .. import semconv
from .breakdown import Breakdown, PhaseTime
from .model import Span

_STATUS = {"error": "error", "status_code_error": "error", "ok": "ok", "status_code_ok": "ok"}


def status_of(code: str) -> str:
    return _STATUS.get(str(code).lower(), "unset")


def startup_from_row(row: Sequence, typed: Callable[[str], object]) -> Breakdown:
    (trace_id, span_id, start_ns, end_ns, status, attributes, resource, _exact, unattributed, total_busy,
     phases, busy, counts, cache) = row
    root = Span(trace_id, span_id, None, semconv.SPAN_ROOT, int(start_ns), int(end_ns),
                attributes=_typed(attributes, typed), resource=_typed(resource, typed), status=status_of(status))
    times = tuple(map(_phase_time, phases, busy, counts))  # in Breakdown.phases' order already (the SQL's)
    return Breakdown(root=root, phases=times, unattributed_ns=int(unattributed), total_busy_ns=int(total_busy),
                     shards=(), after_ready=0, slim_cache=cache or None)


_set = object.__setattr__


def _phase_time(name: str, busy_ns: int, spans: int) -> PhaseTime:
    """PhaseTime(name, busy_ns, spans, 0): the fields a reduced row has, set directly; the
    others are the class's defaults (byte and bandwidth figures: not reduced). A fleet has a
    million of them, and the frozen dataclass's __init__ sets all ten one by one."""
    item = _new(PhaseTime)
    _set(item, "phase", sys.intern(name))
    _set(item, "busy_ns", busy_ns)
    _set(item, "spans", spans)
    _set(item, "bytes", 0)
    return item


_new = object.__new__


def _typed(values: Mapping[str, str], typed: Callable[[str], object]) -> dict:
    return {sys.intern(key): typed(value) for key, value in values.items()}
