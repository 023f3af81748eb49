"""Start-ups that never ended, and start-ups that stalled: pure functions over records.

A start-up killed with SIGKILL (the kubelet after its startup probe gave up, the OOM
killer) exports no root: it ends where it was. What it leaves is what was already written:
its finished spans and its progress records (``coldstart.progress`` spans, written every
few seconds by otel_coldstart/inflight.py, each naming the root's start and the spans open
at that moment). :func:`complete_killed` rebuilds such a start-up from the latest record:

- the root ``model.startup``, from its recorded start to the last sign of life (the
  latest record), with ``coldstart.ready=false``, ``coldstart.end_reason=killed`` and
  ``coldstart.end.phase`` set to the phase that was running;
- every span open at that record and not written since, ended at the last sign of life
  and marked ``coldstart.interrupted``.
- every aggregate (casts, copies: written as a span only when its parent ends) listed on
  that record and not written since, with the figures it had then.

Progress records are then dropped (they are not work), so the breakdown, findings and
renderers read a killed start-up as they read any other, and its spans have their parents
(no "missing parent" warning). A start-up that did end ignores its records.

A start-up still running reads the same as a killed one: the file cannot tell them apart;
the last sign of life says how recent it is.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import semconv, verdicts
from .breakdown import Breakdown
from .model import Span, SpanEvent
from .settlements import merge_settlements

MAX_OPEN_REBUILT = 64  # open spans rebuilt per start-up (a record lists at most 32)


def complete_killed(spans: Iterable[Span]) -> list[Span]:
    """``spans`` with storage settlements merged into their file spans
    (analyze/settlements.py), every killed start-up rebuilt from its latest progress
    record, and every progress record removed: the record pipeline every reader uses."""
    spans = merge_settlements(spans)
    records = [s for s in spans if s.name == semconv.SPAN_PROGRESS]
    if not records:
        return spans
    others = [s for s in spans if s.name != semconv.SPAN_PROGRESS]
    ended = {(s.trace_id, s.span_id) for s in others if s.is_root}
    present: set[tuple] = {(s.trace_id, s.span_id) for s in others}  # keys of three shapes, below
    # An import in progress is listed under an id of the record's own (its span gets another
    # when it ends): one that ended after the record was written is known by its start.
    present |= {(s.trace_id, s.name, s.start_ns) for s in others if s.phase == semconv.PHASE_IMPORT}
    # An aggregate's span is known by where it was counted: its name, thread and first call.
    present.update((s.trace_id, s.name, s.thread_id, s.start_ns) for s in others if s.aggregate_busy_ns is not None)
    latest: dict[tuple[str, str], Span] = {}
    stall_events: dict[tuple[str, str], list[SpanEvent]] = {}  # per start-up: linear in the records
    for record in records:
        if record.parent_id is None or (record.trace_id, record.parent_id) in ended:
            continue
        key = (record.trace_id, record.parent_id)
        best = latest.get(key)
        if best is None or (record.end_ns, _seq(record)) > (best.end_ns, _seq(best)):
            latest[key] = record
        stall_events.setdefault(key, []).extend(e for e in record.events if e.name == semconv.EVENT_STALL)
    rebuilt: list[Span] = []
    for (trace_id, root_id), record in sorted(latest.items()):
        rebuilt.extend(_rebuild(record, root_id, present, stall_events[(trace_id, root_id)]))
    return others + rebuilt


def _seq(record: Span) -> int:
    value = record.attributes.get(semconv.PROGRESS_SEQ)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _json(record: Span, key: str, kind: type) -> Any:
    value = record.attributes.get(key)
    if not isinstance(value, str):
        return kind()
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return kind()
    return parsed if isinstance(parsed, kind) else kind()


def _hex(value: Any, width: int) -> str | None:
    if not isinstance(value, str) or len(value) != width:
        return None
    try:
        int(value, 16)
    except ValueError:
        return None
    return value.lower()


def _primitive_attributes(value: Any) -> dict:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, (str, bool, int, float))}


def _rebuild(record: Span, root_id: str, present: set, stall_events: list[SpanEvent]) -> list[Span]:
    last_seen = record.end_ns
    root_info = _json(record, semconv.PROGRESS_ROOT, dict)
    start = verdicts.int_value(root_info, "start_ns")
    if start is None or not 0 <= start <= last_seen:
        start = last_seen
    phase = record.attributes.get(semconv.PROGRESS_PHASE)
    open_spans = []
    for item in _json(record, semconv.PROGRESS_OPEN, list)[:MAX_OPEN_REBUILT]:
        if not isinstance(item, dict):
            continue
        span_id = _hex(item.get("span_id"), 16)
        item_start = verdicts.int_value(item, "start_ns")
        name = item.get("name")
        if span_id is None or item_start is None or not isinstance(name, str) or not start <= item_start <= last_seen:
            continue
        if (record.trace_id, span_id) in present or (record.trace_id, name, item_start) in present:
            continue  # it ended after the record was written: its own span says more
        attrs = _primitive_attributes(item.get("attributes"))
        if isinstance(item.get("phase"), str):
            attrs[semconv.PHASE] = item["phase"]
        if verdicts.int_value(item, "thread_id") is not None:
            attrs[semconv.THREAD_ID] = item["thread_id"]
        attrs[semconv.INTERRUPTED] = True
        events = tuple(e for e in stall_events if e.attributes.get(semconv.STALL_SPAN_ID) == span_id)
        open_spans.append(Span(record.trace_id, span_id, _hex(item.get("parent_id"), 16) or root_id, name,
                               item_start, last_seen, attrs, record.resource, "unset", events))
    open_spans.extend(_rebuild_aggregates(record, root_id, start, last_seen, present))
    root_attrs = _primitive_attributes(root_info.get("attributes"))
    root_attrs.update({semconv.READY: False, semconv.END_REASON: semconv.END_KILLED})
    if isinstance(phase, str):
        root_attrs[semconv.END_PHASE] = phase
    for key in (semconv.PROGRESS_BYTES_LOADED, semconv.PROGRESS_BYTES_EXPECTED):
        if verdicts.int_value(record.attributes, key) is not None:
            root_attrs[key] = record.attributes[key]
    source = record.attributes.get(semconv.PROGRESS_BYTES_EXPECTED_SOURCE)
    if isinstance(source, str):
        root_attrs[semconv.PROGRESS_BYTES_EXPECTED_SOURCE] = source
    # What the time-to-ready estimate expected at the last sign of life (time_to_ready.py).
    remaining = record.attributes.get(semconv.PROGRESS_REMAINING_S)
    if isinstance(remaining, (int, float)) and not isinstance(remaining, bool) and 0 <= remaining < 1e9:
        root_attrs[semconv.PROGRESS_REMAINING_S] = float(remaining)
    if verdicts.int_value(record.attributes, semconv.PROGRESS_REMAINING_HISTORY) is not None:
        root_attrs[semconv.PROGRESS_REMAINING_HISTORY] = record.attributes[semconv.PROGRESS_REMAINING_HISTORY]
    attached = {id(e) for s in open_spans for e in s.events}
    root_events = tuple(e for e in stall_events if id(e) not in attached
                        and not (e.attributes.get(semconv.STALL_SPAN_ID) and
                                 (record.trace_id, e.attributes.get(semconv.STALL_SPAN_ID)) in present))
    root = Span(record.trace_id, root_id, _hex(root_info.get("parent_id"), 16), semconv.SPAN_ROOT, start, last_seen,
                root_attrs, record.resource, "unset", root_events)
    return [root] + open_spans


def _rebuild_aggregates(record: Span, root_id: str, start: int, last_seen: int, present: set) -> list[Span]:
    """The aggregates the record lists (otel_coldstart/recorder.py ``interim_records``) whose
    own span was not written since: each with the figures it had at the record. Work that
    went on after the record is not in it (a lower bound, never more than happened)."""
    rebuilt = []
    for item in _json(record, semconv.PROGRESS_AGGREGATES, list)[:MAX_OPEN_REBUILT]:
        if not isinstance(item, dict):
            continue
        name, item_start, item_end = item.get("name"), verdicts.int_value(item, "start_ns"), verdicts.int_value(item, "end_ns")
        attrs = _primitive_attributes(item.get("attributes"))
        if (not isinstance(name, str) or item_start is None or item_end is None
                or not start <= item_start <= item_end <= last_seen or attrs.get(semconv.AGGREGATE) is not True):
            continue
        thread_id = verdicts.int_value(attrs, semconv.THREAD_ID)
        if (record.trace_id, name, thread_id, item_start) in present:
            continue  # written since the record: its own span has the final figures
        if isinstance(item.get("phase"), str):
            attrs[semconv.PHASE] = item["phase"]
        span_id = format(zlib.crc32(f"{name}/{thread_id}/{item_start}".encode()) << 32 | 0x5EC0DE, "016x")
        rebuilt.append(Span(record.trace_id, span_id, _hex(item.get("parent_id"), 16) or root_id, name,
                            item_start, item_end, attrs, record.resource, "unset"))
    return rebuilt


# --- what the renderers say --------------------------------------------------------------

@dataclass(frozen=True)
class OpenAtDeath:
    """A span that was running at the last sign of life."""

    name: str
    phase: str | None
    elapsed_ns: int  # from its start to the last sign of life
    shard_index: int | None
    file: str | None
    module: str | None = None  # an import's: "import torch" was running



@dataclass(frozen=True)
class Killed:
    """A start-up rebuilt from its progress records: where it was when it died."""

    at_ns: int  # last sign of life, from the root's start
    phase: str | None  # the phase running then
    running: OpenAtDeath | None  # the innermost open span
    open: tuple[OpenAtDeath, ...]  # all open spans, outermost first
    bytes_loaded: int | None
    bytes_expected: int | None
    # What bytes_expected is made of (semconv.EXPECTED_FROM_*); None from an older plugin.
    expected_source: str | None = None
    # The time-to-ready estimate at the last sign of life: seconds still to go, and how many
    # earlier start-ups it was from (0: none, so no estimate); None from an older plugin.
    remaining_s: float | None = None
    remaining_history: int | None = None

    @property
    def expected_ready_ns(self) -> int | None:
        """When it expected to be ready (from the root's start), or None without an estimate."""
        return None if self.remaining_s is None else self.at_ns + int(self.remaining_s * 1e9)

    @property
    def expected_words(self) -> str:
        """What the expected bytes are, after the share: the checkpoint's index knows the
        whole; the files opened so far are only a lower bound of it (nothing when unknown)."""
        if self.expected_source == semconv.EXPECTED_FROM_INDEX:
            return ", per the checkpoint's index"
        if self.expected_source:  # files_opened, or index+files_opened
            return " of the files opened so far"
        return ""


def killed(breakdown: Breakdown) -> Killed | None:
    """Where a killed start-up was, or None for a start-up that ended."""
    root = breakdown.root
    if root.attributes.get(semconv.END_REASON) != semconv.END_KILLED:
        return None
    interrupted = sorted((s for s in breakdown.spans if s.attributes.get(semconv.INTERRUPTED) is True),
                         key=lambda s: (s.start_ns, s.span_id))
    items = tuple(_open_item(s) for s in interrupted)
    phase = root.attributes.get(semconv.END_PHASE)
    phase = phase if isinstance(phase, str) else None
    running = None
    if items:
        matching = [i for i in items if i.phase == phase]
        running = (matching or list(items))[-1]
    source = root.attributes.get(semconv.PROGRESS_BYTES_EXPECTED_SOURCE)
    remaining = root.attributes.get(semconv.PROGRESS_REMAINING_S)
    return Killed(root.duration_ns, phase, running, items, verdicts.int_value(root.attributes, semconv.PROGRESS_BYTES_LOADED),
                  verdicts.int_value(root.attributes, semconv.PROGRESS_BYTES_EXPECTED),
                  source if isinstance(source, str) else None,
                  float(remaining) if isinstance(remaining, float) else None,
                  verdicts.int_value(root.attributes, semconv.PROGRESS_REMAINING_HISTORY))


def _open_item(span: Span) -> OpenAtDeath:
    path = span.attributes.get(semconv.FILE_PATH)
    module = span.attributes.get(semconv.IMPORT_MODULE) if span.phase == semconv.PHASE_IMPORT else None
    return OpenAtDeath(span.name, span.phase, span.duration_ns, verdicts.int_value(span.attributes, semconv.SHARD_INDEX),
                       os.path.basename(path) if isinstance(path, str) else None,
                       module if isinstance(module, str) else None)


@dataclass(frozen=True)
class Stall:
    """One ``coldstart.stall`` event: the start-up made no progress for ``idle_s``."""

    at_ns: int  # from the root's start
    idle_s: float | None
    phase: str | None
    span_name: str  # the span it was recorded on
    thread: str | None  # the waiting thread's header line
    top_frames: tuple[str, ...]  # innermost first
    threads: int  # threads in the recorded stacks
    # When the waiting thread waits on other threads (a pool, a future, a queue): the threads
    # that were in the user's code then, each (header, frames innermost first down to the
    # innermost frame of user code): where the work it waited for actually was.
    workers: tuple[tuple[str, tuple[str, ...]], ...] = ()


# A frame as inflight.format_stacks writes it: "function (path:line)".
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*):(?P<line>\d+)\)$")
# Paths that are not the user's code: the standard library, installed packages, frozen
# modules, otel-coldstart itself (judged from the path alone: the trace was recorded
# elsewhere, so this machine's sys.path says nothing).
_NOT_USER_CODE = re.compile(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib(?:64)?[/\\]python\d[\d.]*[/\\]"
                            r"|[/\\]Lib[/\\]|^<|[/\\]otel_coldstart[/\\]")
# Where a thread waits for other threads: locks and conditions, queues, futures and pools.
_WAITS_ON_OTHERS = re.compile(r"[/\\](?:threading|queue)\.py$|[/\\]concurrent[/\\]futures[/\\]"
                              r"|[/\\]multiprocessing[/\\]")
WORKER_FRAMES = 4


def _frame_path(frame: str) -> str | None:
    match = _FRAME.match(frame)
    return match.group("path") if match else None


def is_user_frame(frame: str) -> bool:
    path = _frame_path(frame)
    return bool(path and not _NOT_USER_CODE.search(path))


def waits_on_other_threads(frames: list[str]) -> bool:
    """The thread's innermost frame is a wait on a lock, condition, queue, future or pool."""
    path = _frame_path(frames[0]) if frames else None
    return bool(path and _WAITS_ON_OTHERS.search(path))


def _workers(blocks: list[tuple[str, list[str]]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The other threads that were in user code, each down to its innermost user frame."""
    found = []
    for header, frames in blocks[1:]:
        if header.startswith("thread otel-coldstart"):
            continue
        first_user = next((i for i, frame in enumerate(frames) if is_user_frame(frame)), None)
        if first_user is None:
            continue  # an idle pool thread, a library's own thread
        shown = frames[:first_user + 1]
        if len(shown) > WORKER_FRAMES:
            shown = shown[:WORKER_FRAMES - 1] + [shown[-1]]
        found.append((header, tuple(shown)))
    return tuple(found)


def stalls(breakdown: Breakdown, frames: int = 4) -> list[Stall]:
    """Every stall recorded in this start-up, in time order (one per stall: the same event
    on a span and on a progress record is counted once)."""
    found: dict[int, Stall] = {}
    root = breakdown.root
    for span in (root,) + tuple(breakdown.spans):
        for event in span.events:
            if event.name != semconv.EVENT_STALL or event.time_ns in found:
                continue
            stacks = event.attributes.get(semconv.STALL_STACKS)
            blocks = parse_stacks(stacks) if isinstance(stacks, str) else []
            header, lines = blocks[0] if blocks else (None, [])
            idle = event.attributes.get(semconv.STALL_IDLE_S)
            phase = event.attributes.get(semconv.STALL_PHASE)
            found[event.time_ns] = Stall(
                max(0, event.time_ns - root.start_ns), _idle_seconds(idle),
                phase if isinstance(phase, str) else span.phase, span.name, header, tuple(lines[:frames]),
                len(blocks), _workers(blocks) if waits_on_other_threads(lines) else ())
    return [found[t] for t in sorted(found)]


def _idle_seconds(value) -> float | None:
    """A stall's idle time as the monitor writes it (seconds, finite, not negative); anything
    else a trace may hold (text, a bool, NaN, 1e299) is unknown, never a figure to format."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e9:
        return None
    return float(value)


def parse_stacks(text: str) -> list[tuple[str, list[str]]]:
    """(thread header, frames innermost first) per thread, as inflight.format_stacks wrote them."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("thread "):
            blocks.append((line.rstrip(":"), []))
        elif line.startswith("  ") and blocks and line.strip() != "...":
            blocks[-1][1].append(line.strip())
    return blocks


def interruption_document(breakdown: Breakdown) -> dict:
    """The JSON report's ``killed`` and ``stalls`` keys for one start-up (plain data)."""
    item = killed(breakdown)
    document: dict[str, Any] = {"killed": None, "stalls": []}
    if item is not None:
        document["killed"] = {
            "last_sign_of_life_s": item.at_ns / 1e9, "phase": item.phase,
            "running": _open_document(item.running) if item.running else None,
            "open": [_open_document(o) for o in item.open],
            "bytes_loaded": item.bytes_loaded, "bytes_expected": item.bytes_expected,
            "bytes_expected_source": item.expected_source,
            "remaining_s": item.remaining_s, "remaining_history": item.remaining_history,
            "expected_ready_s": item.expected_ready_ns / 1e9 if item.expected_ready_ns is not None else None,
        }
    document["stalls"] = [
        {"offset_s": s.at_ns / 1e9, "idle_s": s.idle_s, "phase": s.phase, "span": s.span_name, "thread": s.thread,
         "top_frames": list(s.top_frames), "threads": s.threads,
         "workers": [{"thread": header, "frames": list(lines)} for header, lines in s.workers]}
        for s in stalls(breakdown)
    ]
    return document


def _open_document(item: OpenAtDeath) -> dict:
    return {"name": item.name, "phase": item.phase, "elapsed_s": item.elapsed_ns / 1e9,
            "shard_index": item.shard_index, "file": item.file, "module": item.module}
