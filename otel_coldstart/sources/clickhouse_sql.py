"""The SQL that reduces start-ups to one row each inside ClickHouse, over the table the
OpenTelemetry Collector's ClickHouse exporter writes (clickhouse_ddl.py).

What crosses the wire is one row per start-up: its root (times, attributes, resource), the
busy time of each phase, unattributed time, the cache verdict, and a flag saying whether
the SQL could settle it exactly. The rules are breakdown.compute_breakdown's, restated in
SQL for the shape the plugin writes (one ``model.startup`` per trace, every span right under
the root or under a phased span):

- the window: phased spans inside the root's times;
- a phased span's owner is its parent when that parent is the root or a phased span; an
  owner outside the window, a missing parent or a span that is its own parent makes it top
  level (an orphan), as phased_tree does;
- self time: busy time (an aggregate's busy_s, else its duration) minus the busy time of
  its window children on the same thread, never below 0;
- unattributed: the root's duration minus the busy time of the top-level window spans on
  the root's thread, never below 0.

Every trace outside that shape is flagged (``exact = 0``) and its spans are fetched and
analysed by the file path's own code (analyze/assemble.analyse_trace): more than one root,
a phased span under an unphased one (a user's or a server's span: the nearest phased
ancestor needs a walk), a server's own start-up spans (vLLM: one start-up over several
processes), progress or settlement records (a killed start-up rebuilt, storage figures
merged), a repeated span id, times or values the integrity checks would change. So the
result is the file path's, exactly, whatever the traces.

Values are bound as query parameters (``{name:Type}``), never spliced into the text; the
table name, the one identifier, is checked against a strict pattern first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import semconv

LATEST_NS = 4_102_444_800 * 10**9  # integrity.LATEST_NS: 2100-01-01
LONGEST_NS = 366 * 24 * 3600 * 10**9  # integrity.LONGEST_NS
# A start-up's spans are looked for this long around its root's start (the table is
# partitioned by day: the time bound keeps the scan to the days in range).
SPAN_SLACK_NS = 24 * 3600 * 10**9

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}(\.[A-Za-z_][A-Za-z0-9_]{0,127})?$")
_WHERE = re.compile(r"^(resource|span|service)(\.([A-Za-z0-9_.\-/:]{1,200}))?\s*(!=|=)\s*(.*)$", re.S)
VLLM_SERVER_SPANS = ("API server setup", "Overall Loading", "EngineCoreProc init", "Executor init", "Worker init",
                     "Init device", "Load model", "Load weights", "Loading (GPU)", "Prepare model", "Capture model",
                     "Warmup (GPU)", "Download weights - HF")  # analyze/outline.VLLM_STARTUP_SPANS
# integrity.NON_NEGATIVE and RATIOS: a negative or out-of-range value is dropped by the
# file path's checks, so a trace with one is left to it.
_NON_NEGATIVE = (semconv.FILE_SIZE, semconv.BYTES, semconv.IO_READ_BYTES, semconv.CACHE_STORAGE_READ_BYTES,
                 semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES, semconv.COPY_PINNED_BYTES, semconv.COPY_PAGEABLE_BYTES,
                 semconv.CALLS, semconv.BUSY_S, semconv.THROUGHPUT, semconv.PROGRESS_BYTES_LOADED,
                 semconv.PROGRESS_BYTES_EXPECTED)
_RATIOS = (semconv.CACHE_RESIDENT_RATIO, semconv.CACHE_SETTLED_RESIDENT_RATIO)


class FilterError(ValueError):
    """A --where, --table or time range that cannot be used: one line, a usage error."""


@dataclass(frozen=True)
class Condition:
    """One ``--where``: ``resource.KEY=VALUE`` (the start-up's resource attribute),
    ``span.KEY=VALUE`` (the root span's attribute) or ``service=NAME``; ``!=`` for not."""

    scope: str  # resource | span | service
    key: str
    value: str
    negate: bool = False


def parse_where(text: str) -> Condition:
    """Strict: a scope, a key of plain characters, ``=`` or ``!=``, and a value taken as it
    is (it is bound as a parameter, so quotes and SQL in it are just characters to match)."""
    match = _WHERE.match(text.strip())
    if not match:
        raise FilterError(f"--where {text!r}: use resource.KEY=VALUE, span.KEY=VALUE or service=NAME "
                          "(keys of letters, digits and . _ - / :)")
    scope, key, op, value = match.group(1), match.group(3) or "", match.group(4), match.group(5)
    if (scope == "service") != (key == ""):
        raise FilterError(f"--where {text!r}: resource. and span. need a key; service takes none")
    if len(value) > 4096:
        raise FilterError(f"--where {text[:40]!r}...: the value is longer than 4096 characters")
    return Condition(scope, key, value, op == "!=")


def check_table(name: str) -> str:
    if not _TABLE.match(name):
        raise FilterError(f"--table {name!r}: a table name is letters, digits and _ (database.table at most)")
    return ".".join(f"`{part}`" for part in name.split("."))


@dataclass
class Selection:
    """Which start-ups: the roots in [from, to) that match the conditions."""

    table: str = "otel_traces"
    from_ns: int = 0
    to_ns: int = LATEST_NS
    service: str | None = None
    conditions: list[Condition] = field(default_factory=list)

    def root_filter(self, params: dict, prefix: str = "", killed_too: bool = False) -> str:
        """The WHERE of the roots, its values put in ``params``. ``killed_too``: also the
        progress records of start-ups killed before their root was written."""
        params[f"{prefix}t_from"] = str(self.from_ns)
        params[f"{prefix}t_to"] = str(self.to_ns)
        names = (semconv.SPAN_ROOT, semconv.SPAN_PROGRESS) if killed_too else (semconv.SPAN_ROOT,)
        parts = [f"SpanName IN ({', '.join(_q(name) for name in names)})",
                 f"Timestamp >= fromUnixTimestamp64Nano({{{prefix}t_from:Int64}})",
                 f"Timestamp < fromUnixTimestamp64Nano({{{prefix}t_to:Int64}})"]
        if self.service is not None:
            params[f"{prefix}service"] = self.service
            parts.append(f"ServiceName = {{{prefix}service:String}}")
        for number, cond in enumerate(self.conditions):
            value = f"{prefix}w{number}v"
            params[value] = cond.value
            if cond.scope == "service":
                column = "ServiceName"
            else:
                key = f"{prefix}w{number}k"
                params[key] = cond.key
                column = f"{'ResourceAttributes' if cond.scope == 'resource' else 'SpanAttributes'}[{{{key}:String}}]"
            parts.append(f"{column} {'!=' if cond.negate else '='} {{{value}:String}}")
        return " AND ".join(parts)

    def span_filter(self, params: dict, prefix: str = "") -> str:
        """The spans of the selected start-ups: their traces, within a day of the range."""
        params[f"{prefix}s_from"] = str(max(0, self.from_ns - SPAN_SLACK_NS))
        params[f"{prefix}s_to"] = str(self.to_ns + SPAN_SLACK_NS)
        table = check_table(self.table)
        return (f"TraceId IN (SELECT TraceId FROM {table} WHERE {self.root_filter(params, prefix, True)}) "
                f"AND Timestamp >= fromUnixTimestamp64Nano({{{prefix}s_from:Int64}}) "
                f"AND Timestamp < fromUnixTimestamp64Nano({{{prefix}s_to:Int64}})")


def _q(text: str) -> str:
    """A constant of ours as a SQL string literal (semconv names: no quote in them)."""
    assert "'" not in text and "\\" not in text
    return f"'{text}'"


def _list(values) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def count_sql(selection: Selection) -> tuple[str, dict]:
    """How many spans the reduction would read: the figure --max-rows is held against."""
    params: dict = {}
    table = check_table(selection.table)
    return (f"SELECT count() AS spans, uniqExactIf(TraceId, SpanName = '{semconv.SPAN_ROOT}') AS traces "
            f"FROM {table} WHERE {selection.span_filter(params)}", params)


def reduce_sql(selection: Selection) -> tuple[str, dict]:
    """One row per selected root: see the module's docstring. Columns, in order: TraceId,
    root SpanId, root start ns, root end ns, root StatusCode, root SpanAttributes, root
    ResourceAttributes, exact (0: analyse its spans in Python), unattributed ns, total busy
    ns, phase names, phase busy ns, phase span counts, cache verdict ('' for none)."""
    params: dict = {}
    table = check_table(selection.table)
    a = "SpanAttributes"
    busy_s = f"toFloat64OrNull({a}[{_q(semconv.BUSY_S)}])"
    is_agg = f"{a}[{_q(semconv.AGGREGATE)}] = 'true'"
    # Span.busy_ns: an aggregate's busy_s (banker's rounding, as Python's round), never more
    # than its duration; otherwise, or without a usable busy_s, the duration.
    busy = (f"if({is_agg} AND {busy_s} IS NOT NULL AND {busy_s} >= 0, "
            f"if({busy_s} * 1e9 >= toFloat64(dur), dur, toInt64(round({busy_s} * 1e9))), dur)")
    stored = f"toInt64OrNull({a}[{_q(semconv.CACHE_STORAGE_READ_BYTES)}])"
    # breakdown._storage_read_bytes: the per-file figure, else (an older trace) the span's own counter
    read_bytes = (f"if({stored} IS NOT NULL OR mapContains({a}, {_q(semconv.CACHE_STORAGE_READ_UNKNOWN)}), {stored}, "
                  f"toInt64OrNull({a}[{_q(semconv.IO_READ_BYTES)}]))")
    size = f"toInt64OrNull({a}[{_q(semconv.FILE_SIZE)}])"
    recorded = f"{a}[{_q(semconv.CACHE_STATE)}]"
    # verdicts.shard_cache_state, then cold/partial -> 1, warm -> 2, none -> 0
    state = (f"multiIf({recorded} IN ('cold', 'partial'), 1, {recorded} = 'warm', 2, "
             f"{read_bytes} IS NOT NULL AND {size} IS NOT NULL AND {size} > 0, "
             f"multiIf({read_bytes} / {size} >= 0.5, 1, {read_bytes} / {size} < 0.05, 2, 1), 0)")
    suspect = (f"Duration > {LONGEST_NS} OR toInt64(Duration) < 0 OR toUnixTimestamp64Nano(Timestamp) + toInt64(Duration) > {LATEST_NS} "
               f"OR SpanName IN ({_q(semconv.SPAN_PROGRESS)}, {_q(semconv.SPAN_SETTLEMENT)}) "
               f"OR (SpanName IN {_list(VLLM_SERVER_SPANS)} AND {a}[{_q(semconv.PHASE)}] = '') "
               f"OR startsWith({a}['code.namespace'], 'vllm') "
               f"OR match(TraceId, '^0*$') OR match(SpanId, '^0*$') "
               f"OR arrayExists(k -> startsWith({a}[k], '-'), {_list(_NON_NEGATIVE)}) "
               f"OR arrayExists(k -> toFloat64OrZero({a}[k]) > 1 OR startsWith({a}[k], '-'), {_list(_RATIOS)})")
    spans = (f"SELECT cityHash64(TraceId) AS th, TraceId AS tid, SpanId AS sid, ParentSpanId AS pid, "
             f"SpanName = '{semconv.SPAN_ROOT}' AS is_root, {a}[{_q(semconv.PHASE)}] AS phase, "
             f"toUnixTimestamp64Nano(Timestamp) AS t0, toInt64(Duration) AS dur, t0 + dur AS t1, {busy} AS busy, "
             f"toInt64OrNull({a}[{_q(semconv.THREAD_ID)}]) AS thread, "
             f"StatusCode IN ('Error', 'STATUS_CODE_ERROR') AS failed, "
             f"if(phase = {_q(semconv.PHASE_DESERIALIZE)} AND NOT failed, {state}, 0) AS cstate, "
             f"({suspect}) AS suspect "
             f"FROM {table} WHERE {selection.span_filter(params)}")
    parents = (f"SELECT cityHash64(TraceId) AS th, SpanId AS sid, {a}[{_q(semconv.PHASE)}] AS phase, "
               f"SpanName = '{semconv.SPAN_ROOT}' AS is_root, toUnixTimestamp64Nano(Timestamp) AS t0, "
               f"t0 + toInt64(Duration) AS t1, toInt64OrNull({a}[{_q(semconv.THREAD_ID)}]) AS thread "
               f"FROM {table} WHERE {selection.span_filter(params, 'p_')}")
    roots = (f"SELECT TraceId AS tid, SpanId AS rid, toUnixTimestamp64Nano(Timestamp) AS r0, r0 + toInt64(Duration) AS r1, "
             f"toInt64OrNull({a}[{_q(semconv.THREAD_ID)}]) AS rthread, StatusCode AS rstatus, {a} AS rattrs, "
             f"ResourceAttributes AS rres FROM {table} WHERE {selection.root_filter(params, 'r_')}")
    # Each span with its parent and its start-up's root; one row (or two) out per span:
    # (node, phase, +busy) for itself, (parent, '', -busy) for a window child on the
    # parent's thread; the sums per node are self times.
    joined = (f"SELECT s.tid AS tid, s.sid AS sid, s.pid AS pid, s.is_root AS is_root, s.phase AS phase, s.busy AS busy, "
              f"s.thread AS thread, s.cstate AS cstate, s.suspect AS suspect, r.r0 AS r0, r.r1 AS r1, r.rthread AS rthread, "
              f"s.phase != '' AND NOT s.is_root AND s.t0 >= r.r0 AND s.t1 <= r.r1 AS win, "
              f"p.sid != '' AND s.pid != '' AND s.pid != s.sid AS p_found, "
              f"p_found AND (p.is_root OR p.phase != '') AS p_stop, "
              f"p_found AND p.phase != '' AND NOT p.is_root AND p.t0 >= r.r0 AND p.t1 <= r.r1 AS p_win, "
              f"p.thread IS NULL OR s.thread IS NULL OR p.thread = s.thread AS p_same, "
              f"r.rthread IS NULL OR s.thread IS NULL OR r.rthread = s.thread AS r_same "
              f"FROM ({spans}) AS s LEFT JOIN ({roots}) AS r ON s.tid = r.tid "
              f"ANY LEFT JOIN ({parents}) AS p ON s.th = p.th AND s.pid = p.sid")
    per_node = (f"SELECT tid, node, max(ph) AS phase, greatest(0, sum(v)) AS own, sum(n) AS n, "
                f"sum(ua) AS ua, max(flag) AS flag, sum(roots) AS roots, max(cold) AS cold, max(warm) AS warm "
                f"FROM (SELECT tid, tupleElement(c, 1) AS node, tupleElement(c, 2) AS ph, tupleElement(c, 3) AS v, "
                f"tupleElement(c, 4) AS n, tupleElement(c, 5) AS ua, tupleElement(c, 6) AS flag, "
                f"tupleElement(c, 7) AS roots, tupleElement(c, 8) AS cold, tupleElement(c, 9) AS warm "
                f"FROM ({joined}) ARRAY JOIN arrayFilter(x -> tupleElement(x, 10), ["
                f"tuple(sid, if(win, phase, ''), if(win, busy, 0), toInt64(1), "
                f"if(win AND NOT p_win AND r_same, busy, 0), "
                f"suspect OR (win AND p_found AND NOT p_stop), toInt64(is_root), "
                f"win AND cstate = 1, win AND cstate = 2, true), "
                f"tuple(pid, '', -busy, toInt64(0), toInt64(0), false, toInt64(0), false, false, win AND p_win AND p_same)"
                f"]) AS c) GROUP BY tid, node")
    per_phase = (f"SELECT tid, phase, sum(own) AS busy, countIf(phase != '') AS spans, sum(ua) AS ua, "
                 f"max(flag OR n > 1) AS flag, sum(roots) AS roots, max(cold) AS cold, max(warm) AS warm "
                 f"FROM ({per_node}) GROUP BY tid, phase")
    per_trace = (f"SELECT tid, groupArrayIf(phase, phase != '') AS ph_names, groupArrayIf(busy, phase != '') AS ph_busy, "
                 f"groupArrayIf(spans, phase != '') AS ph_counts, sum(ua) AS t_ua, sum(busy) AS total_busy, "
                 f"max(flag) OR sum(roots) != 1 AS flagged, max(cold) AS cold, max(warm) AS warm "
                 f"FROM ({per_phase}) GROUP BY tid")
    # A trace without a selected root (a killed start-up's progress record) comes out too,
    # flagged: the file path rebuilds it.
    sql = (f"SELECT t.tid, r.rid, r.r0, r.r1, r.rstatus, r.rattrs, r.rres, NOT t.flagged AND r.rid != '' AS exact, "
           f"greatest(0, (r.r1 - r.r0) - t.t_ua) AS unattributed, t.total_busy, t.ph_names, t.ph_busy, t.ph_counts, "
           f"multiIf(t.cold, 'cold', t.warm, 'warm', '') AS cache "
           f"FROM ({per_trace}) AS t LEFT JOIN ({roots}) AS r ON r.tid = t.tid ORDER BY r.r0, t.tid, r.rid")
    return sql, params


def spans_sql(selection: Selection, trace_ids: list[str]) -> tuple[str, dict]:
    """Every span of these traces, for the file path's own analysis (the ones the SQL left)."""
    params: dict = {"ids": trace_ids}
    table = check_table(selection.table)
    params["s_from"] = str(max(0, selection.from_ns - SPAN_SLACK_NS))
    params["s_to"] = str(selection.to_ns + SPAN_SLACK_NS)
    return (f"SELECT TraceId, SpanId, ParentSpanId, SpanName, toUnixTimestamp64Nano(Timestamp), toInt64(Duration), "
            f"StatusCode, SpanAttributes, ResourceAttributes, Events.Name, "
            f"arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Attributes FROM {table} "
            f"WHERE has({{ids:Array(String)}}, TraceId) "
            f"AND Timestamp >= fromUnixTimestamp64Nano({{s_from:Int64}}) "
            f"AND Timestamp < fromUnixTimestamp64Nano({{s_to:Int64}})", params)
