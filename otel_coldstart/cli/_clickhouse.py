"""``--clickhouse URL`` for capacity, compare and whatif, and ``export --clickhouse``: start-ups
from the table the Collector's ClickHouse exporter writes (docs/fleet.md).

capacity and compare: the start-ups are reduced in ClickHouse to one row each
(sources/clickhouse_sql.py) and made into the records the file path makes
(analyze/from_rows.py); the few traces the SQL leaves (several roots, a killed start-up, a
server's own spans...) are fetched whole and analysed by the file path's own code. whatif:
the levers read each start-up's spans (its shards, copies, captures), so the spans of the
selected start-ups are fetched, up to --max-rows, and analysed as files are."""

from __future__ import annotations

import argparse
import datetime
import functools
import re
import sys
from collections.abc import Sequence

from .. import semconv
from ..analyze.assemble import analyse_trace
from ..analyze.from_rows import startup_from_row, status_of
from ..analyze.model import Span, SpanEvent
from ..analyze.units import parse_duration_ns
from ._inputs import Inputs, check_number
from .errors import EXIT_INPUT_TOO_LARGE, EXIT_SOURCE_UNAVAILABLE, EXIT_USAGE, CliError

DEFAULT_MAX_ROWS = 100_000_000  # spans one command may read: 2,000,000 start-ups of 50 spans
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_SINCE = "30d"


def add_clickhouse_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ClickHouse (the Collector's ClickHouse exporter's table; docs/fleet.md)")
    group.add_argument("--clickhouse", metavar="URL",
                       help="read start-ups from ClickHouse: http(s)://[user@]host:8123/database (password from "
                            "CLICKHOUSE_PASSWORD) or chdb:PATH (embedded; pip install 'otel-coldstart[clickhouse]')")
    group.add_argument("--table", default="otel_traces", help="the exporter's traces table (default %(default)s)")
    group.add_argument("--since", default=None, metavar="DURATION",
                       help=f"start-ups that began this long ago or later, e.g. 30d, 12h (default {DEFAULT_SINCE})")
    group.add_argument("--from", dest="time_from", default=None, metavar="TIME",
                       help="start-ups that began at or after this time (ISO 8601, UTC unless it says)")
    group.add_argument("--to", dest="time_to", default=None, metavar="TIME", help="... and before this time")
    group.add_argument("--where", action="append", default=[], metavar="CONDITION",
                       help="resource.KEY=VALUE, span.KEY=VALUE (the root span's) or service=NAME; != for not "
                            "(repeatable: all must hold)")
    if not any(a.dest == "service" for a in parser._actions):
        group.add_argument("--service", default=None, metavar="NAME", help="the start-ups of this service.name")
    group.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, metavar="N",
                       help="refuse a query that would read more spans than this (default %(default)s)")
    if not any(a.dest == "timeout" for a in parser._actions):
        group.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                           help="seconds each ClickHouse query may run (default %(default)g)")


def _time(text: str, option: str) -> int:
    try:
        if re.match(r"^\d+(\.\d+)?$", text):
            return int(float(text) * 1e9)
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{option} {text!r}: not a time (use e.g. 2026-09-01 or 2026-09-01T12:00:00Z)", EXIT_USAGE) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


def _since_ns(text: str) -> int:
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*d\s*$", text)
    if match:
        return int(float(match.group(1)) * 86400e9)
    try:
        return parse_duration_ns(text)
    except ValueError as exc:
        raise CliError(f"--since: {exc}; days as e.g. 30d", EXIT_USAGE) from None


def selection(args: argparse.Namespace, extra: Sequence[str] = ()):
    """The start-ups asked for, checked before anything is sent (usage errors: exit 2)."""
    from ..sources.clickhouse_sql import FilterError, Selection, check_table, parse_where

    if args.since and (args.time_from or args.time_to):
        raise CliError("--since and --from/--to: give one or the other", EXIT_USAGE)
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp()) * 10**9
    if args.time_from or args.time_to:
        start = _time(args.time_from, "--from") if args.time_from else 0
        end = _time(args.time_to, "--to") if args.time_to else now + 86400 * 10**9
    else:
        start, end = now - _since_ns(args.since or DEFAULT_SINCE), now + 86400 * 10**9
    if end <= start:
        raise CliError("--to must be after --from", EXIT_USAGE)
    if args.max_rows <= 0:
        raise CliError("--max-rows must be positive", EXIT_USAGE)
    check_number(args.timeout, "--timeout", 24 * 3600)
    try:
        check_table(args.table)
        conditions = [parse_where(text) for text in [*args.where, *extra]]
    except FilterError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return Selection(args.table, start, end, getattr(args, "service", None), conditions)


def _fail(exc) -> CliError:
    if exc.kind == "usage":
        return CliError(str(exc), EXIT_USAGE)
    if exc.kind == "too_many_rows":
        return CliError(f"{exc} (raise --max-rows, or narrow --since/--where)", EXIT_INPUT_TOO_LARGE)
    if exc.kind == "timeout":
        return CliError(f"{exc} (raise --timeout, or narrow --since/--where)", EXIT_SOURCE_UNAVAILABLE)
    return CliError(str(exc), EXIT_SOURCE_UNAVAILABLE)


def connect(url: str):
    from ..sources.clickhouse import ClickHouseError, connect as open_connection

    try:
        return open_connection(url)
    except ClickHouseError as exc:
        raise _fail(exc) from None


def load_clickhouse(args: argparse.Namespace, extra: Sequence[str] = (), *, label: str | None = None,
                    spans_too: bool = False) -> Inputs:
    """The selected start-ups as Inputs. ``spans_too`` (whatif): every start-up from its spans."""
    from ..sources.clickhouse import ClickHouseError
    from ..sources.clickhouse_sql import count_sql, killed_sql, reduce_sql

    chosen = selection(args, list(extra))
    conn = connect(args.clickhouse)
    shown = label or conn.shown
    try:
        chosen.json_attributes = _json_attributes(conn, chosen, args.timeout)
        typed = _typed_row if chosen.json_attributes else _typed
        sql, params = count_sql(chosen)
        (spans, traces), = list(conn.query(sql, params, args.timeout))
        if spans > args.max_rows:
            raise CliError(f"{shown}: the query would read {spans:,} spans of {traces:,} start-up trace(s), over "
                           f"--max-rows {args.max_rows:,}: narrow --since/--where, or raise --max-rows",
                           EXIT_INPUT_TOO_LARGE)
        if spans_too:
            startups: list = []
        else:
            sql, params = reduce_sql(chosen)
            startups, left_over = [], set()
            for row in conn.query(sql, params, args.timeout, max_rows=args.max_rows):
                if row[7]:
                    if chosen.json_attributes:
                        row[5], row[6] = _json_row_attributes(row[5]), _json_row_attributes(row[6])
                    startups.append(startup_from_row(row, typed))
                else:
                    left_over.add(row[0])
            sql, params = killed_sql(chosen)
            left_over |= {row[0] for row in conn.query(sql, params, args.timeout)}
        left = sorted(left_over) if not spans_too else None
        fetched = _analyse_spans(conn, chosen, left, args, slim=not spans_too) if left is None or left else []
    except ClickHouseError as exc:
        raise _fail(exc) from None
    finally:
        conn.close()
    startups += fetched
    startups.sort(key=lambda b: (b.root.start_ns, b.trace_id, b.root.span_id))
    note = {"source": shown, "format": "clickhouse", "spans": spans, "startups": len(startups), "warnings": [],
            "reduced_in_sql": len(startups) - len(fetched), "analysed_from_spans": len(fetched)}
    if fetched and not spans_too:
        print(f"otel-coldstart: note: {shown}: {len(fetched)} start-up(s) analysed from their spans (a shape the "
              "SQL leaves to the file path: several roots, a killed start-up, a server's own spans...)",
              file=sys.stderr)
    return Inputs([note], startups, spans=spans)


def _json_attributes(conn, chosen, timeout: float) -> bool:
    """Whether the table's attribute columns are JSON (newer exporters' json option)."""
    from ..sources.clickhouse_sql import columns_sql, json_typed

    sql, params = columns_sql(chosen.table)
    return json_typed({name: kind for name, kind in conn.query(sql, params, timeout)})


def _typed_row(value):
    """A JSON column's value: typed already (the row's attributes came as JSON text)."""
    return value


@functools.lru_cache(maxsize=1 << 16)
def _typed(text: str):
    """typed_value, the same object for the same text: a fleet's 100,000 roots repeat a few
    hundred values (instance types, services, versions), held once each."""
    from ..sources.clickhouse import typed_value

    return typed_value(text)


def _analyse_spans(conn, chosen, trace_ids: list[str] | None, args: argparse.Namespace, slim: bool) -> list:
    """The start-ups of these traces (None: every selected one) by the file path's analysis."""
    from ..sources.clickhouse_sql import spans_sql

    sql, params = spans_sql(chosen, trace_ids)
    rows = conn.query(sql, params, args.timeout, max_rows=args.max_rows)
    by_trace: dict[str, list[Span]] = {}
    for row in rows:
        span = _span(row, chosen.json_attributes)
        by_trace.setdefault(span.trace_id, []).append(span)
    startups = []
    for spans in by_trace.values():
        startups.extend(analyse_trace(spans, slim=slim).startups)
    return startups


def _span(row, json_attributes: bool = False) -> Span:
    (trace_id, span_id, parent_id, name, start_ns, duration, status, attributes, resource, event_names,
     event_times, event_attributes) = row
    attrs = _json_row_attributes if json_attributes else _map_attributes
    events = tuple(SpanEvent(n, int(t), attrs(a))
                   for n, t, a in zip(event_names, event_times, event_attributes) if n.startswith(semconv.SPAN_PREFIX))
    return Span(trace_id, span_id, parent_id or None, name, int(start_ns), int(start_ns) + int(duration),
                attributes=attrs(attributes), resource=attrs(resource), status=status_of(status),
                events=tuple(sorted(events, key=lambda e: e.time_ns)))


def _map_attributes(values: dict) -> dict:
    return {k: _typed(v) for k, v in values.items()}


def _json_row_attributes(text: str) -> dict:
    from ..sources.clickhouse import flat_attributes

    return flat_attributes(text)


def files_or_clickhouse(args: argparse.Namespace, files: list[str]) -> bool:
    """True: read --clickhouse; False: read the files. Both, or neither, is a usage error."""
    if args.clickhouse and files:
        raise CliError("give trace files or --clickhouse URL, not both", EXIT_USAGE)
    if not args.clickhouse:
        if not files:
            raise CliError("give trace files or directories (or --clickhouse URL)", EXIT_USAGE)
        ch_only = [o for o, v in (("--where", args.where), ("--since", args.since), ("--from", args.time_from),
                                  ("--to", args.time_to)) if v]
        if ch_only:
            raise CliError(f"{', '.join(ch_only)}: only with --clickhouse URL", EXIT_USAGE)
        return False
    return True
