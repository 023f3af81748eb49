"""ClickHouse as a trace source: the table the OpenTelemetry Collector's ClickHouse exporter
writes, reached over ClickHouse's HTTP interface or in this process through chDB.

- ``http(s)://[user@]host:8123/database``: the user from the URL, the password from
  ``CLICKHOUSE_PASSWORD`` (never from the command line, never printed). Reads go as GET,
  which ClickHouse runs read-only, bounded in time and bytes (bounded_http); the exports
  of ``export --clickhouse`` go as POST.
- ``chdb:PATH``: an embedded chDB data directory (the ``clickhouse`` extra), for a laptop or
  a test to run the same SQL without a server.

Every query's values are bound parameters (``{name:Type}``); nothing here builds SQL from
what a user typed (clickhouse_sql.py checks the one identifier, the table name).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from decimal import Decimal

from . import bounded_http
from .bounded_http import ByteBudget, FetchError, origin
from .live import redact as live_redact

PASSWORD_ENV = "CLICKHOUSE_PASSWORD"
MAX_ANSWER_BYTES = 1 << 30  # one reduction answer: ~300 bytes a start-up, so millions fit
INSERT_BATCH_ROWS = 20_000


class ClickHouseError(Exception):
    """One line without credentials. ``kind``: ``timeout``, ``too_many_rows``, ``unavailable``
    (connection, HTTP, SQL error), ``missing`` (chDB not installed), ``usage`` (a bad URL)."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(" ".join(str(message).split())[:2000])
        self.kind = kind


_TIMEOUT_CODES = (159, 160, 209)  # TIMEOUT_EXCEEDED, TOO_SLOW, SOCKET_TIMEOUT
_ROWS_CODES = (158,)  # TOO_MANY_ROWS


def _server_error(text: str) -> ClickHouseError:
    match = re.search(r"Code: (\d+)", text)
    code = int(match.group(1)) if match else None
    first = text.strip().splitlines()[0] if text.strip() else "no message"
    if code in _TIMEOUT_CODES:
        return ClickHouseError(f"the query ran out of time ({first[:300]})", "timeout")
    if code in _ROWS_CODES:
        return ClickHouseError(first[:400], "too_many_rows")
    if code in (60, 81):  # UNKNOWN_TABLE, UNKNOWN_DATABASE
        what = re.search(r"identifier '([^']+)'|Table (\S+) does not exist|Database (\S+) does not exist", first)
        name = next((g for g in what.groups() if g), "") if what else ""
        return ClickHouseError(f"no such table or database {name} (the Collector's ClickHouse exporter makes "
                               "otel_traces, as export --clickhouse does; --table names another)".replace("  ", " "))
    return ClickHouseError(first[:400])


class Connection:
    """``query(sql, params) -> list of rows`` (JSONCompactEachRow), ``insert(table, rows)``."""

    shown: str  # how the target may be printed

    def query(self, sql: str, params: dict, timeout: float, max_rows: int | None = None) -> Iterator[list]:
        """The answer's rows, parsed one at a time as they are taken."""
        raise NotImplementedError

    def execute(self, sql: str, timeout: float) -> None:
        raise NotImplementedError

    def insert(self, table: str, rows: Iterable[dict], timeout: float) -> int:
        raise NotImplementedError


def _settings(timeout: float, max_rows: int | None) -> str:
    # Short-circuit for every function: an attribute looked up only where it counts (a cache
    # verdict's on deserialize spans, busy_s on aggregates), 5M spans in a few lookups each.
    parts = [f"max_execution_time={max(1, int(timeout + 0.999))}", "output_format_json_quote_64bit_integers=0",
             "short_circuit_function_evaluation='force_enable'"]
    if max_rows is not None:
        # A backstop to the count done first: each scan is held to the figure.
        parts += [f"max_rows_to_read={int(max_rows)}", "read_overflow_mode='throw'"]
    return " SETTINGS " + ", ".join(parts)


def _rows(text: str | bytes) -> Iterator[list]:
    """The rows of a JSONCompactEachRow answer, one at a time: 100,000 start-ups are 60 MB of
    text, never held again as a list of lines beside the rows made of them."""
    for line in io.BytesIO(text if isinstance(text, bytes) else text.encode()):
        if line.strip():
            yield json.loads(line)


ARROW_BATCH_ROWS = 8192  # rows made into Python objects at once: the heap holds one batch of them


def _arrow_rows(data: bytes) -> Iterator[list]:
    """The rows of an ArrowStream answer, as the JSON rows are: lists of Python values, a Map
    as a dict; made a batch at a time, column by column (pyarrow's to_pylist)."""
    import pyarrow

    if not data:
        return
    table = pyarrow.ipc.open_stream(data).read_all()
    for batch in table.to_batches(max_chunksize=ARROW_BATCH_ROWS):
        columns = [_python(column) for column in batch.columns]
        yield from map(list, zip(*columns))


def _python(column) -> list:
    import pyarrow

    kind = column.type
    values = column.to_pylist()
    if pyarrow.types.is_map(kind):
        return [dict(v) if v is not None else {} for v in values]
    if pyarrow.types.is_list(kind) and pyarrow.types.is_map(kind.value_type):
        return [[dict(m) if m is not None else {} for m in v] if v is not None else [] for v in values]
    return values


class ChdbConnection(Connection):
    def __init__(self, path: str) -> None:
        try:
            from chdb import session  # the optional extra: otel-coldstart[clickhouse]
        except ImportError:
            raise ClickHouseError("chdb: not installed (pip install 'otel-coldstart[clickhouse]')", "missing") from None
        self.path = path
        self.shown = f"chdb:{path}"
        try:
            self._session = session.Session(path)
        except Exception as exc:  # noqa: BLE001 - chDB raises its own types; one line out
            raise ClickHouseError(f"{self.shown}: cannot open ({exc})") from None

    def _run(self, sql: str, fmt: str = "JSONCompactEachRow", params: dict | None = None) -> bytes:
        try:
            result = self._session.query(sql, fmt, params=params or None)
        except Exception as exc:  # noqa: BLE001
            error = _server_error(str(exc))
            raise ClickHouseError(f"{self.shown}: {error}", error.kind) from None
        return result.bytes() if hasattr(result, "bytes") else str(result).encode()

    def query(self, sql: str, params: dict, timeout: float, max_rows: int | None = None) -> Iterator[list]:
        """Arrow, not JSON text: chDB writes a 100,000-row reduction as JSON in ~1.7 s of CPU and
        Python parses it in ~1 s more; as Arrow (pyarrow comes with chdb) both are a fraction."""
        return _arrow_rows(self._run(sql + _settings(timeout, max_rows), "ArrowStream",
                                     params={name: _param_text(value) for name, value in params.items()}))

    def execute(self, sql: str, timeout: float) -> None:
        self._run(sql, "TabSeparated")

    def insert(self, table: str, rows: Iterable[dict], timeout: float) -> int:
        count = 0
        for batch in _batches(rows):
            body = "\n".join(json.dumps(row, separators=(",", ":")) for row in batch)
            self._run(f"INSERT INTO {table} FORMAT JSONEachRow\n{body}", "TabSeparated")
            count += len(batch)
        return count

    def close(self) -> None:
        try:
            self._session.close()
        except Exception:  # noqa: BLE001 - closing never hides the result
            pass


_AUTH_STATUSES = (401, 403, 516)  # 516: ClickHouse's AUTHENTICATION_FAILED, sent as the status


class HttpConnection(Connection):
    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        try:
            parts.port  # noqa: B018 - raises ValueError on a port out of range
        except ValueError:
            raise ClickHouseError(f"{redact(url)}: not a valid URL", "usage") from None
        if parts.password is not None:
            raise ClickHouseError(f"{redact(url)}: a password in the URL is refused; set {PASSWORD_ENV} instead",
                                  "usage")
        if not parts.hostname:
            raise ClickHouseError(f"{redact(url)}: no host", "usage")
        database = parts.path.strip("/") or "default"
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", database):
            raise ClickHouseError(f"{redact(url)}: {database!r} is not a database name", "usage")
        self.database = database
        self.user = urllib.parse.unquote(parts.username) if parts.username else "default"
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        self.base = urllib.parse.urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), "/", "", ""))
        self.shown = redact(url)
        token = f"{self.user}:{os.environ.get(PASSWORD_ENV, '')}"
        self._auth = "Basic " + base64.b64encode(token.encode()).decode()
        self._parts = parts
        self._hostname = parts.hostname  # checked above: never empty

    def _url(self, params: dict) -> str:
        query = {"database": self.database}
        for name, value in params.items():
            query[f"param_{name}"] = _param_text(value)
        return self.base + "?" + urllib.parse.urlencode(query)

    def query(self, sql: str, params: dict, timeout: float, max_rows: int | None = None) -> Iterator[list]:
        url = self._url({**params}) + "&" + urllib.parse.urlencode(
            {"query": sql + _settings(timeout, max_rows) + " FORMAT JSONCompactEachRow"})
        try:
            body = bounded_http.get(url, {"User-Agent": "otel-coldstart"}, deadline=time.monotonic() + timeout,
                                    budget=ByteBudget(MAX_ANSWER_BYTES), credentials=(origin(url), self._auth))
        except FetchError as exc:
            if exc.kind == "timeout":
                raise ClickHouseError(f"{self.shown}: no answer within {timeout:g} s", "timeout") from None
            if exc.status in _AUTH_STATUSES:
                raise ClickHouseError(f"{self.shown}: authentication failed for user {self.user!r} (the password "
                                      f"is read from {PASSWORD_ENV})") from None
            raise ClickHouseError(f"{self.shown}: {exc}") from None
        except OSError as exc:
            raise ClickHouseError(f"{self.shown}: {exc.strerror or exc}") from None
        return _rows(body)

    def _post(self, query: str, body: bytes, timeout: float) -> None:
        cls = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(self._hostname, self._parts.port, timeout=timeout)
        try:
            conn.request("POST", self._url({}) + "&" + urllib.parse.urlencode({"query": query}), body,
                         {"Authorization": self._auth, "User-Agent": "otel-coldstart"})
            answer = conn.getresponse()
            text = answer.read(1 << 20).decode("utf-8", "replace")
            if answer.status in _AUTH_STATUSES:
                raise ClickHouseError(f"{self.shown}: authentication failed for user {self.user!r} (the password "
                                      f"is read from {PASSWORD_ENV})")
            if answer.status != 200:
                raise _server_error(text or f"HTTP {answer.status}")
        except TimeoutError:
            raise ClickHouseError(f"{self.shown}: no answer within {timeout:g} s", "timeout") from None
        except OSError as exc:
            raise ClickHouseError(f"{self.shown}: {exc.strerror or exc}") from None
        finally:
            conn.close()

    def execute(self, sql: str, timeout: float) -> None:
        self._post(sql, b"", timeout)

    def insert(self, table: str, rows: Iterable[dict], timeout: float) -> int:
        count = 0
        for batch in _batches(rows):
            body = "\n".join(json.dumps(row, separators=(",", ":")) for row in batch).encode()
            self._post(f"INSERT INTO {table} FORMAT JSONEachRow", body, timeout)
            count += len(batch)
        return count

    def close(self) -> None:
        pass


def _param_text(value) -> str:
    """A parameter as ClickHouse's HTTP interface takes it: text in the type's own syntax."""
    if isinstance(value, list):
        return "[" + ",".join("'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'" for v in value) + "]"
    return str(value)


def _batches(rows: Iterable[dict]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= INSERT_BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


def redact(url: str) -> str:
    """The URL as it may be printed: no userinfo, no query string (live.redact); a chDB
    path as it is."""
    return url if url.startswith("chdb:") else live_redact(url)


def connect(url: str) -> Connection:
    if url.startswith("chdb:"):
        path = url[len("chdb:"):]
        if not path:
            raise ClickHouseError("chdb: give the data directory, e.g. chdb:/var/lib/otel-chdb", "usage")
        return ChdbConnection(path)
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ClickHouseError(f"{redact(url)}: use http(s)://host:8123/database or chdb:PATH", "usage")
    return HttpConnection(url)


# --- what the exporter writes for a span (export --clickhouse) ----------------------------

def attribute_text(value) -> str:
    """An attribute value as the exporter stores it in a Map(String, String): pcommon's
    Value.AsString (booleans true/false, integers in decimal, doubles in their shortest
    round-trip form without exponent between 1e-6 and 1e21, arrays as JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if value == 0 or 1e-6 <= abs(value) < 1e21:
            text = format(Decimal(repr(value)), "f")
            return text.rstrip("0").rstrip(".") if "." in text else text
        return repr(value)
    if isinstance(value, (tuple, list)):
        return json.dumps(list(value), separators=(",", ":"))
    return str(value)


def typed_value(text: str):
    """The value back from its text (the Map column lost its type): true/false, an integer,
    a number, else the text. An attribute that was the string "3" comes back as 3."""
    if text == "true":
        return True
    if text == "false":
        return False
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def flat_attributes(text: str) -> dict:
    """A JSON attribute column's text (toJSONString) as flat attributes: ClickHouse's JSON
    type made a path of each dotted key, so its objects are joined back into dotted keys.
    The values keep their types (the JSON column kept them); arrays come back as tuples."""
    out: dict = {}

    def walk(prefix: str, value: dict) -> None:
        for key, item in value.items():
            if isinstance(item, dict):
                walk(f"{prefix}{key}.", item)
            else:
                out[sys.intern(prefix + key)] = tuple(item) if isinstance(item, list) else item

    walk("", json.loads(text) if text else {})
    return out


_INT = re.compile(r"^-?(0|[1-9][0-9]{0,18})$")
_FLOAT = re.compile(r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


def _json_value(value):
    return list(value) if isinstance(value, tuple) else value


def _status(status: str) -> str:
    return {"error": "Error", "ok": "Ok"}.get(status, "Unset")


def _timestamp(ns: int) -> str:
    """DateTime64(9) as JSONEachRow takes it: seconds with nine decimals."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def span_row(span, scope_name: str = "otel_coldstart", json_attributes: bool = False) -> dict:
    """One otel_traces row for a span, as the exporter would have written it: attributes as
    text for Map columns, typed for JSON ones (``json_attributes``)."""
    value = _json_value if json_attributes else attribute_text
    resource = {k: value(v) for k, v in span.resource.items()}
    return {
        "Timestamp": _timestamp(span.start_ns),
        "TraceId": span.trace_id,
        "SpanId": span.span_id,
        "ParentSpanId": span.parent_id or "",
        "TraceState": "",
        "SpanName": span.name,
        "SpanKind": "Internal",
        "ServiceName": attribute_text(span.resource.get("service.name", "")),
        "ResourceAttributes": resource,
        "ScopeName": scope_name,
        "ScopeVersion": "",
        "SpanAttributes": {k: value(v) for k, v in span.attributes.items()},
        "Duration": (span.end_ns - span.start_ns) % 2**64,  # the exporter's uint64: an end before the start wraps
        "StatusCode": _status(span.status),
        "StatusMessage": "",
        "Events.Timestamp": [_timestamp(e.time_ns) for e in span.events],
        "Events.Name": [e.name for e in span.events],
        "Events.Attributes": [{k: value(v) for k, v in e.attributes.items()} for e in span.events],
        "Links.TraceId": [],
        "Links.SpanId": [],
        "Links.TraceState": [],
        "Links.Attributes": [],
    }

