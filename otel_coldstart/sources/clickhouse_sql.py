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
    # The attribute columns are JSON (newer exporters' json option), not Map(String, String):
    # read from the table's own column types (columns_sql) before anything else is sent.
    json_attributes: bool = False

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
                column = attribute('ResourceAttributes' if cond.scope == 'resource' else 'SpanAttributes',
                                   f"{{{key}:String}}", self.json_attributes)
            parts.append(f"{column} {'!=' if cond.negate else '='} {{{value}:String}}")
        return " AND ".join(parts)

    def span_filter(self, params: dict, prefix: str = "", joined: bool = False) -> str:
        """The spans of the selected start-ups: their traces, within a day of the range.

        ``joined``: the query joins these spans to the selected roots itself (the reduction's
        passes), so the trace filter only narrows what the join would drop. Without a
        --service or --where nearly every trace in the time range is selected, and probing
        each pass's 5M trace ids against the set of 100,000 cost 1-2 s of the reduction's
        10-14 s of CPU (benchmarks/RESULTS.md, issue 40 third round) for nothing: left out
        there. With conditions it stays, as the trace-id bloom-filter index can skip granules
        of a narrow selection."""
        params[f"{prefix}s_from"] = str(max(0, self.from_ns - SPAN_SLACK_NS))
        params[f"{prefix}s_to"] = str(self.to_ns + SPAN_SLACK_NS)
        table = check_table(self.table)
        times = (f"Timestamp >= fromUnixTimestamp64Nano({{{prefix}s_from:Int64}}) "
                 f"AND Timestamp < fromUnixTimestamp64Nano({{{prefix}s_to:Int64}})")
        if joined and self.service is None and not self.conditions:
            return times
        return f"TraceId IN (SELECT TraceId FROM {table} WHERE {self.root_filter(params, prefix, True)}) AND {times}"


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
    ns, phase names, phase busy ns, phase span counts, cache verdict ('' for none).

    Ids are grouped by their 64-bit hashes (trace, span): integer keys group several times
    faster than the hex strings; two spans of a trace would have to share both hashes to be
    mistaken for one (about 2^-128), and the rows are joined back to their roots by the id
    itself."""
    params: dict = {}
    table = check_table(selection.table)
    json_attributes = selection.json_attributes

    def attr(key: str) -> str:
        return attribute("SpanAttributes", _q(key), json_attributes)

    # Span.busy_ns: an aggregate's busy_s (banker's rounding, as Python's round), never more
    # than its duration; otherwise, or without a usable busy_s, the duration.
    busy = (f"if({attr(semconv.AGGREGATE)} = 'true' AND bs >= 0, "
            f"if(bs * 1e9 >= toFloat64(dur), dur, toInt64(round(bs * 1e9))), dur)")
    busy_s = f"toFloat64OrNull({attr(semconv.BUSY_S)}) AS bs"
    # A negative count is dropped by the integrity checks (integrity.NON_NEGATIVE): absent here too.
    stored = f"nullIf(greatest(toInt64OrNull({attr(semconv.CACHE_STORAGE_READ_BYTES)}), -1), -1)"
    counter = f"nullIf(greatest(toInt64OrNull({attr(semconv.IO_READ_BYTES)}), -1), -1)"
    # breakdown._storage_read_bytes: the per-file figure, else (an older trace) the span's own counter
    read_bytes = (f"if({stored} IS NOT NULL OR {has_attribute('SpanAttributes', _q(semconv.CACHE_STORAGE_READ_UNKNOWN), json_attributes)}, {stored}, "
                  f"{counter})")
    size = f"toInt64OrNull({attr(semconv.FILE_SIZE)})"
    recorded = attr(semconv.CACHE_STATE)
    # verdicts.shard_cache_state, then cold/partial -> 1, warm -> 2, none -> 0
    state = (f"multiIf({recorded} IN ('cold', 'partial'), 1, {recorded} = 'warm', 2, "
             f"{read_bytes} IS NOT NULL AND {size} IS NOT NULL AND {size} > 0, "
             f"multiIf({read_bytes} / {size} >= 0.5, 1, {read_bytes} / {size} < 0.05, 2, 1), 0)")
    # What the file path's checks would change (integrity.check): a span left out for its
    # times or ids, progress and settlement records, a server's own spans. Values they would
    # drop need no check here: a negative busy_s or size reads as absent in the SQL too, a
    # negative read counter is made absent above, and the page-cache ratios are not read.
    suspect = (f"Duration > {LONGEST_NS} OR toInt64(Duration) < 0 OR toUnixTimestamp64Nano(Timestamp) + toInt64(Duration) > {LATEST_NS} "
               f"OR SpanName IN ({_q(semconv.SPAN_PROGRESS)}, {_q(semconv.SPAN_SETTLEMENT)}) "
               f"OR (phase = '' AND (SpanName IN {_tuple(VLLM_SERVER_SPANS)} OR startsWith({attr('code.namespace')}, 'vllm'))) "
               f"OR SpanId IN ('', '0000000000000000') OR TraceId IN ('', '00000000000000000000000000000000')")
    roots = (f"SELECT cityHash64(TraceId) AS th, TraceId AS tid, SpanId AS rid, toUnixTimestamp64Nano(Timestamp) AS r0, "
             f"r0 + toInt64(Duration) AS r1, StatusCode AS rstatus, {whole('SpanAttributes', json_attributes)} AS rattrs, "
             f"{whole('ResourceAttributes', json_attributes)} AS rres "
             f"FROM {table} WHERE {selection.root_filter(params, 'r_')}")
    thread = f"toInt64OrNull({attr(semconv.THREAD_ID)})"
    # One window a trace (several roots: the trace is flagged below, by its spans' count of roots).
    windows = (f"SELECT cityHash64(TraceId) AS th, any(cityHash64(SpanId)) AS rsh, "
               f"any(toUnixTimestamp64Nano(Timestamp)) AS r0, any(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration)) AS r1, "
               f"any({thread}) AS rthread "
               f"FROM {table} WHERE {selection.root_filter(params, 'w_')} GROUP BY th")
    ids = (f"cityHash64(TraceId) AS th, cityHash64(SpanId) AS sh, "
           f"if(ParentSpanId = '', 0, cityHash64(ParentSpanId)) AS ph, {attr(semconv.PHASE)} AS phase, "
           f"toUnixTimestamp64Nano(Timestamp) AS t0, toInt64(Duration) AS dur")
    win = "phase != '' AND NOT is_root AND t0 >= w.r0 AND t0 + dur <= w.r1"
    on_root_thread = "if(win AND (w.rthread IS NULL OR thread IS NULL OR w.rthread = thread), busy, 0)"
    # A window span under a span other than the root (and not its own parent) may be a window
    # node's own time. The plugin writes most spans right under the root, so such spans are
    # few: the kids pass keeps the spans whose parent is not their trace's root (a filter on
    # the two id columns against the roots' pairs, before any attribute is read), sums them
    # per parent and thread, and the main pass meets those sums in a small join instead of
    # grouping every span by its id. (A first pass collecting the distinct non-root parents
    # cost a scan and a 5M-row DISTINCT more, for the same spans.)
    root_pairs = f"SELECT th, rsh FROM ({windows})"
    kids = (f"SELECT s.th AS th, ph, groupArray(ifNull(thread, -1)) AS k_threads, groupArray(busy) AS k_busy, "
            f"sum({on_root_thread.replace('win AND ', '')}) AS k_ua, count() AS k_count "
            f"FROM (SELECT {ids}, SpanName = '{semconv.SPAN_ROOT}' AS is_root, {busy_s}, "
            f"toInt64(ifNull({busy}, dur)) AS busy, {thread} AS thread "
            f"FROM {table} WHERE {selection.span_filter(params, 'k_', joined=True)} AND ParentSpanId != '' "
            f"AND (cityHash64(TraceId), cityHash64(ParentSpanId)) NOT IN ({root_pairs})) AS s "
            f"INNER JOIN ({windows}) AS w ON s.th = w.th WHERE ph != sh AND {win} GROUP BY th, ph")
    spans = (f"SELECT {ids}, SpanName = '{semconv.SPAN_ROOT}' AS is_root, {busy_s}, "
             f"toInt64(ifNull({busy}, dur)) AS busy, {thread} AS thread, "
             f"if(phase = {_q(semconv.PHASE_DESERIALIZE)} AND StatusCode NOT IN ('Error', 'STATUS_CODE_ERROR'), "
             f"{state}, 0) AS cstate, ({suspect}) AS suspect "
             f"FROM {table} WHERE {selection.span_filter(params, joined=True)}")
    # Each span with its window and its window children's busy time (per thread) if it has
    # any: its own time is its busy time less its children's on its thread, never below 0;
    # a window span's children are not top level, so their time on the root's thread is
    # taken back from what the span adds to the root's covered time. A span without a phase
    # (not the root) with window children: the nearest phased ancestor needs a walk, and the
    # trace goes to the file path.
    placed = (f"SELECT s.th AS th, sh, is_root, phase, cstate, suspect, {win} AS win, "
              f"if(win, greatest(0, busy - arraySum(arrayMap((t, b) -> if(t = -1 OR thread IS NULL OR t = thread, b, 0), "
              f"k.k_threads, k.k_busy))), 0) AS own, "
              f"{on_root_thread} - if(win, k.k_ua, 0) AS ua, "
              f"suspect OR (k.k_count > 0 AND NOT is_root AND phase = '') AS flag "
              f"FROM ({spans}) AS s INNER JOIN ({windows}) AS w ON s.th = w.th "
              f"LEFT JOIN ({kids}) AS k ON s.th = k.th AND s.sh = k.ph")
    per_phase = (f"SELECT th, if(win, phase, '') AS phase, sum(own) AS busy, countIf(win) AS spans, sum(ua) AS ua, "
                 f"max(flag) AS flag, countIf(is_root) AS roots, max(cstate = 1 AND win) AS cold, "
                 f"max(cstate = 2 AND win) AS warm, groupArray(sh) AS ids "
                 f"FROM ({placed}) GROUP BY th, phase")
    # Phases largest first, then by name: Breakdown.phases' order, so no sort is left to Python.
    # A repeated span id (an export retried, a bad SDK) is the file path's to settle.
    per_trace = (f"SELECT th, arraySort((x, b) -> (-b, x), groupArrayIf(phase, phase != '') AS names, "
                 f"groupArrayIf(busy, phase != '') AS times) AS ph_names, arraySort((b, x) -> (-b, x), times, names) AS ph_busy, "
                 f"arraySort((n, b, x) -> (-b, x), groupArrayIf(spans, phase != ''), times, names) AS ph_counts, "
                 f"sum(ua) AS t_ua, sum(busy) AS total_busy, "
                 f"max(flag) OR sum(roots) != 1 OR uniqExactArray(ids) != sum(length(ids)) AS flagged, "
                 f"max(cold) AS cold, max(warm) AS warm "
                 f"FROM ({per_phase}) GROUP BY th")
    sql = (f"SELECT r.tid, r.rid, r.r0, r.r1, r.rstatus, r.rattrs, r.rres, NOT t.flagged AS exact, "
           f"greatest(0, (r.r1 - r.r0) - t.t_ua) AS unattributed, t.total_busy, t.ph_names, t.ph_busy, t.ph_counts, "
           f"multiIf(t.cold, 'cold', t.warm, 'warm', '') AS cache "
           f"FROM ({roots}) AS r INNER JOIN ({per_trace}) AS t ON r.th = t.th")
    return sql, params


def attribute(column: str, key: str, json_attributes: bool) -> str:
    """An attribute's text ('' where there is none); ``key`` is SQL (a literal or a bound
    parameter). A Map through its keys and values subcolumns: one indexOf over the keys is
    a third of the cost of ``map[key]``, and 5M spans take a dozen lookups each. A JSON
    column by its path (a dotted key is a path there), its typed value as text, as the
    Map holds it (true, 3, 0.25)."""
    if json_attributes:
        return f"toString(getSubcolumn({column}, {key}))"
    return f"{column}.values[indexOf({column}.keys, {key})]"


def has_attribute(column: str, key: str, json_attributes: bool) -> str:
    if json_attributes:
        return f"getSubcolumn({column}, {key}) IS NOT NULL"
    return f"has({column}.keys, {key})"


def whole(column: str, json_attributes: bool) -> str:
    """Every attribute of the column: the Map itself, or the JSON as text (its objects are
    the dotted keys' parts, joined again by sources/clickhouse.flat_attributes)."""
    return f"toJSONString({column})" if json_attributes else column


def columns_sql(table: str) -> tuple[str, dict]:
    """The table's attribute column types (Map or JSON), and whether the table is there."""
    name = check_table(table).replace("`", "")
    database, _, bare = name.rpartition(".")
    return ("SELECT name, type FROM system.columns WHERE database = if({db:String} = '', currentDatabase(), "
            "{db:String}) AND table = {tb:String} AND name IN ('SpanAttributes', 'ResourceAttributes')",
            {"db": database, "tb": bare})


def json_typed(types: dict[str, str]) -> bool:
    """True when the exporter wrote the attributes as JSON (its ``json`` option)."""
    return any(t.startswith(("JSON", "Object(")) for t in types.values())


def killed_sql(selection: Selection) -> tuple[str, dict]:
    """Traces with a progress record in range: a start-up killed before its root was written
    (rebuilt by the file path from the record), or one whose record outlived it."""
    params: dict = {}
    table = check_table(selection.table)
    where = selection.root_filter(params).replace(f"SpanName IN ({_q(semconv.SPAN_ROOT)})",
                                                  f"SpanName = {_q(semconv.SPAN_PROGRESS)}")
    return f"SELECT DISTINCT TraceId FROM {table} WHERE {where}", params


def _tuple(values) -> str:
    return "(" + ", ".join(_q(v) for v in values) + ")"


def spans_sql(selection: Selection, trace_ids: list[str] | None) -> tuple[str, dict]:
    """Every span of these traces, for the file path's own analysis (the ones the SQL left);
    ``None``: of every selected start-up (whatif)."""
    params: dict = {}
    table = check_table(selection.table)
    if trace_ids is None:
        traces = f"TraceId IN (SELECT TraceId FROM {table} WHERE {selection.root_filter(params, 'r_', True)})"
    else:
        params["ids"] = trace_ids
        traces = "has({ids:Array(String)}, TraceId)"
    params["s_from"] = str(max(0, selection.from_ns - SPAN_SLACK_NS))
    params["s_to"] = str(selection.to_ns + SPAN_SLACK_NS)
    return (f"SELECT TraceId, SpanId, ParentSpanId, SpanName, toUnixTimestamp64Nano(Timestamp), toInt64(Duration), "
            f"StatusCode, {whole('SpanAttributes', selection.json_attributes)}, "
            f"{whole('ResourceAttributes', selection.json_attributes)}, Events.Name, "
            f"arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), "
            f"{'arrayMap(x -> toJSONString(x), Events.Attributes)' if selection.json_attributes else 'Events.Attributes'} "
            f"FROM {table} "
            f"WHERE {traces} "
            f"AND Timestamp >= fromUnixTimestamp64Nano({{s_from:Int64}}) "
            f"AND Timestamp < fromUnixTimestamp64Nano({{s_to:Int64}})", params)
