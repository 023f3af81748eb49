"""``otel-coldstart export --clickhouse URL FILES...``: trace files into the table the
OpenTelemetry Collector's ClickHouse exporter writes (its own DDL, sources/clickhouse_ddl.py),
each span as the exporter would have stored it, so that capacity, compare and whatif
--clickhouse run on a laptop (chdb:PATH) as on the fleet's ClickHouse."""

from __future__ import annotations

import argparse
import sys

from ..analyze.readers import DEFAULT_MAX_BYTES, BatchReader, TraceReadError
from ._clickhouse import DEFAULT_TIMEOUT_S, _fail, connect
from ._inputs import expand_paths
from .errors import EXIT_NOT_A_TRACE, EXIT_PARTIAL_INPUT, EXIT_USAGE, CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files or directories")
    parser.add_argument("--clickhouse", required=True, metavar="URL",
                        help="http(s)://[user@]host:8123/database (password from CLICKHOUSE_PASSWORD) or chdb:PATH")
    parser.add_argument("--table", default="otel_traces", help="the table (default %(default)s; made if missing)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="seconds each insert may take (default %(default)g)")
    parser.add_argument("--json-attributes", action="store_true",
                        help="create the table with the attributes as JSON (the exporter's json option) where it "
                             "does not exist; a table already there is written as its columns are")


def run(args: argparse.Namespace) -> int:
    from ..sources.clickhouse import ClickHouseError, span_row
    from ..sources.clickhouse_ddl import TRACES_JSON_TABLE, TRACES_TABLE
    from ..sources.clickhouse_sql import FilterError, check_table, columns_sql, json_typed

    try:
        table = check_table(args.table)
    except FilterError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    paths = expand_paths(args.files)
    conn = connect(args.clickhouse)
    skipped = 0
    written = 0
    try:
        conn.execute((TRACES_JSON_TABLE if args.json_attributes else TRACES_TABLE).format(table=table), args.timeout)
        sql, params = columns_sql(args.table)  # a table already there is written as its columns are
        typed = json_typed({name: kind for name, kind in conn.query(sql, params, args.timeout)})
        for path in paths:
            def rows(path=path):
                for batch in BatchReader(path, DEFAULT_MAX_BYTES):
                    for span in batch.spans:
                        yield span_row(span, json_attributes=typed)
            try:
                count = conn.insert(table, rows(), args.timeout)
            except TraceReadError as exc:
                if len(paths) == 1:
                    raise CliError(str(exc), EXIT_NOT_A_TRACE) from None
                print(f"otel-coldstart: warning: {exc}; file skipped", file=sys.stderr)
                skipped += 1
                continue
            written += count
    except ClickHouseError as exc:
        raise _fail(exc) from None
    finally:
        conn.close()
    print(f"otel-coldstart: {written} span(s) from {len(paths) - skipped} file(s) written to {args.table} "
          f"at {conn.shown}", file=sys.stderr)
    return EXIT_PARTIAL_INPUT if skipped else 0
