"""Start-ups from the rows a SQL engine reduced them to (sources/clickhouse_sql.py): the
same slim records (Breakdown.slim) that compare and capacity read from trace files, so
their rules (verdicts, dominant phase, lead time, warm pool) run on them unchanged.

Pure: rows in, records out. A row carries the root (times, status, attributes and resource
as text: the exporter's Map columns keep no types, so they are typed back by their text),
each phase's busy time and span count, unattributed time and the cache verdict."""

from __future__ import annotations

import sys
from typing import Callable, Mapping, Sequence

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
    times = tuple(sorted((PhaseTime(name, int(ns), int(n), 0) for name, ns, n in zip(phases, busy, counts)),
                         key=lambda p: (-p.busy_ns, p.phase)))
    return Breakdown(root=root, phases=times, unattributed_ns=int(unattributed), total_busy_ns=int(total_busy),
                     shards=(), after_ready=0, slim_cache=cache or None)


def _typed(values: Mapping[str, str], typed: Callable[[str], object]) -> dict:
    return {sys.intern(key): typed(value) for key, value in values.items()}
