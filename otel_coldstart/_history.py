"""Earlier start-ups of this service, read from trace files for the time-to-ready estimate.

Read once per start-up, on the in-flight monitor thread (never the host's), from a trace
directory: ``instrument(history_dir=...)`` / ``OTEL_COLDSTART_HISTORY_DIR`` (several joined
by ``os.pathsep``), else the directory this process writes its own trace file to. Only OTLP
JSON is read (our own files, and the Collector's file exporter: one document or JSON lines);
other formats are skipped.

Everything here is bounded, because the directory is not ours to trust: at most
``MAX_ENTRIES`` names listed, the ``MAX_FILES`` newest ``*.json``/``*.jsonl`` regular files
(a FIFO, a device or a socket is never opened: ``_regular_files``), at most ``FILE_BUDGET``
bytes of each (its end, where the newest start-ups are), ``TOTAL_BUDGET`` in all, lines over
``MAX_LINE`` skipped, ``DEADLINE_S`` of wall time, ``MAX_STEPS`` spans kept per start-up and
``MAX_PENDING`` start-ups waiting for their root. A line that is not JSON, is nested too
deeply, holds a number Python refuses or has the wrong shapes is skipped, never raised:
a bad history means a worse (or no) estimate, never a broken start-up.

What is kept of each earlier start-up that reached ``ready()``: its total (process start to
ready), its steps (every span of ours with a phase: name, phase, file, start and end from the
root's start) and its checkpoint bytes over time (the deserialize spans).
"""

from __future__ import annotations

import json
import os
import time

# The records below are NamedTuples, not frozen dataclasses: this module and time_to_ready.py
# are imported on the in-flight monitor's thread while the host is still importing, and each
# millisecond of ours there is one the host waits for the interpreter lock. A frozen
# dataclass costs ~0.9 ms to define, a NamedTuple ~0.13 ms (five of them here and in
# time_to_ready.py: ~4 ms a start-up).
from typing import NamedTuple

from . import semconv
from ._regular_files import open_regular_fd

MAX_ENTRIES = 10_000  # directory entries looked at (a directory of a million files is not read)
MAX_FILES = 64  # the newest trace files read
FILE_BUDGET = 2 << 20  # bytes read from one file (its end)
TOTAL_BUDGET = 4 << 20  # bytes read in all
MAX_LINE = 1 << 20  # a longer line is skipped (one json.loads holds the interpreter: ~20 ms a MiB)
DEADLINE_S = 2.0  # wall time for the whole read (a slow network filesystem)
MAX_STEPS = 4096  # spans kept per start-up (the earliest-starting are kept)
MAX_PENDING = 256  # start-ups whose root has not been seen yet
MAX_STARTUPS = 8  # the newest matching start-ups used
_SUFFIXES = (".jsonl", ".json")
_NOT_STEPS = frozenset({semconv.SPAN_ROOT, semconv.SPAN_PROGRESS, semconv.SPAN_SETTLEMENT})


# A step, one span of ours in an earlier start-up, is an exact tuple (key, start_s, end_s,
# bytes), read by the indices below: key is (name, phase, file name or ""), the times are
# seconds from its root's start, bytes the checkpoint bytes it read (deserialize spans), else
# 0. Not a NamedTuple: the history lives for the whole start-up, and the garbage collector
# stops tracking an exact tuple of plain values at its first collection but keeps tracking a
# NamedTuple for good. 8 start-ups of 4,096 steps as NamedTuples were ~33,000 objects more
# for every full collection of the host's to traverse, and they brought the host's next full
# collection closer (benchmarks/RESULTS.md, "Eighth round").
STEP_KEY, STEP_START_S, STEP_END_S, STEP_BYTES = range(4)


class EarlierStartup(NamedTuple):
    trace_id: str
    ended_ns: int  # the root's end: newest first
    total_s: float  # process start to ready()
    steps: tuple  # of steps (exact tuples: STEP_KEY...), by start
    reads: tuple  # of (start_s, end_s, bytes): checkpoint file reads, by end
    host_type: str | None

    @property
    def checkpoint_bytes(self) -> int:
        return sum(b for _, _, b in self.reads)


class Identity(NamedTuple):
    """What makes an earlier start-up one of this service's."""

    service: str | None
    model: str | None
    host_type: str | None


def step_key(name: str, phase: str | None, path) -> tuple:
    return (name, phase or "", os.path.basename(path) if isinstance(path, str) else "")


class History(NamedTuple):
    startups: tuple  # of EarlierStartup, newest first (at most MAX_STARTUPS)
    directories: tuple  # of str: where it was looked for
    files_read: int
    same_host_type: bool  # the start-ups are all of this host.type (else: of any)


def read_history(directories, identity: Identity, skip_paths=(), skip_trace: str | None = None,
                 deadline_s: float = DEADLINE_S) -> History:
    """The newest earlier start-ups of ``identity``'s service that reached ready(), from
    the trace files in ``directories`` (never ``skip_paths``: this start-up's own file)."""
    deadline = time.monotonic() + deadline_s
    skip = {os.path.abspath(p) for p in skip_paths if p}
    files = _newest_files(directories, skip, deadline)
    found: dict[str, EarlierStartup] = {}
    budget = TOTAL_BUDGET
    read = 0
    for path in files:
        if budget <= 0 or time.monotonic() > deadline:
            break
        reader = _FileReader(identity, skip_trace)
        budget -= reader.read(path, min(FILE_BUDGET, budget), deadline)
        read += 1
        for startup in reader.finished():
            found.setdefault(startup.trace_id, startup)
        if sum(1 for s in found.values() if s.host_type == identity.host_type) >= MAX_STARTUPS:
            break  # the newest files hold enough of them
    startups = sorted(found.values(), key=lambda s: s.ended_ns, reverse=True)
    same = [s for s in startups if s.host_type == identity.host_type]
    chosen = same or startups
    return History(tuple(chosen[:MAX_STARTUPS]), tuple(directories), read, bool(same))


def _newest_files(directories, skip: set, deadline: float) -> list[str]:
    candidates = []
    seen = 0
    for directory in directories:
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_ENTRIES or time.monotonic() > deadline:
                        break
                    if not entry.name.endswith(_SUFFIXES):
                        continue
                    try:
                        info = entry.stat()  # follows a link; the open checks again
                    except OSError:
                        continue
                    path = os.path.abspath(entry.path)
                    if path not in skip:
                        candidates.append((info.st_mtime_ns, path))
        except (OSError, ValueError, TypeError):  # missing, not a directory, unreadable, a NUL in the name
            continue
    candidates.sort(reverse=True)
    return [path for _, path in candidates[:MAX_FILES]]


class _FileReader:
    """Spans of one file, gathered per trace until its root is seen."""

    def __init__(self, identity: Identity, skip_trace: str | None) -> None:
        self.identity = identity
        self.skip_trace = skip_trace
        # A line without the service's name as a JSON string is another service's (a shared
        # Collector file): skipped unparsed. Only for names every JSON writer writes as they
        # are (Go's escapes <, > and &; some writers escape /).
        name = identity.service or ""
        plain = name.isascii() and name.isprintable() and not set(name) & set('"\\<>&/')
        self.needle = b'"' + name.encode() + b'"' if name and plain else b""
        self.steps: dict[str, list] = {}  # trace id -> [(key, start_ns, end_ns, bytes)]
        self.roots: dict[str, tuple] = {}  # trace id -> (start_ns, end_ns, host type)

    def read(self, path: str, budget: int, deadline: float) -> int:
        """Read at most ``budget`` bytes of ``path`` (its end); returns the bytes read."""
        try:
            handle = open(open_regular_fd(path), "rb")
        except (OSError, ValueError, TypeError):
            return 0
        used = 0
        with handle:
            try:
                size = os.fstat(handle.fileno()).st_size
                partial = size > budget
                if partial:
                    handle.seek(size - budget)
                data = handle.read(budget)
            except OSError:
                return 0
            used = len(data)
            lines = data.split(b"\n")
            if partial and lines:
                lines = lines[1:]  # cut in the middle of a line
            if not partial and _one_document(lines):
                lines = [data]  # one document over several lines (pretty-printed)
            for line in lines:
                if time.monotonic() > deadline:
                    break
                if len(line) > MAX_LINE or not line.strip():
                    continue
                # Lines without a span of ours with a phase, and without a root, hold nothing for us.
                if b'"coldstart.phase"' not in line and b'"model.startup"' not in line:
                    continue
                if self.needle not in line:
                    continue
                self._line(line)
                time.sleep(0)  # let the host's threads have the interpreter between lines
        return used

    def _line(self, line: bytes) -> None:
        try:
            document = json.loads(line)
        except (ValueError, RecursionError, MemoryError):
            return
        try:
            for resource_spans in _list(document, "resourceSpans"):
                resource = _attributes(_dict(resource_spans, "resource"))
                if not self._same_service(resource):
                    continue
                host_type = resource.get("host.type")
                for scope_spans in _list(resource_spans, "scopeSpans"):
                    for span in _list(scope_spans, "spans"):
                        self._span(span, host_type if isinstance(host_type, str) else None)
        except (TypeError, ValueError, AttributeError, RecursionError, OverflowError):
            return

    def _same_service(self, resource: dict) -> bool:
        identity = self.identity
        service = resource.get("service.name")
        model = resource.get(semconv.MODEL_NAME)
        return service == identity.service and (model if isinstance(model, str) else None) == identity.model

    def _span(self, span, host_type: str | None) -> None:
        if not isinstance(span, dict):
            return
        trace_id, name = span.get("traceId"), span.get("name")
        if not isinstance(trace_id, str) or not isinstance(name, str) or trace_id == self.skip_trace:
            return
        start, end = _nanos(span.get("startTimeUnixNano")), _nanos(span.get("endTimeUnixNano"))
        if start is None or end is None or end < start:
            return
        attributes = _attributes(span)
        if name == semconv.SPAN_ROOT:
            if attributes.get(semconv.READY) is True and trace_id not in self.roots:
                if len(self.roots) < MAX_PENDING:
                    self.roots[trace_id] = (start, end, host_type)
            return
        phase = attributes.get(semconv.PHASE)
        if name in _NOT_STEPS or not isinstance(phase, str):
            return
        steps = self.steps.get(trace_id)
        if steps is None:
            if len(self.steps) >= MAX_PENDING:
                return
            steps = self.steps[trace_id] = []
        if len(steps) >= MAX_STEPS:
            return
        nbytes = attributes.get(semconv.BYTES) if phase == semconv.PHASE_DESERIALIZE else 0
        steps.append((step_key(name, phase, attributes.get(semconv.FILE_PATH)), start, end,
                      nbytes if isinstance(nbytes, int) and nbytes > 0 else 0))

    def finished(self) -> list[EarlierStartup]:
        out = []
        for trace_id, (start, end, host_type) in self.roots.items():
            steps, reads, files = [], [], set()
            for key, step_start, step_end, nbytes in sorted(self.steps.get(trace_id, ()), key=lambda s: s[1]):
                if step_start < start or step_end > end:
                    continue  # after ready() (or before the root): not part of the way to ready
                start_s, end_s = (step_start - start) / 1e9, (step_end - start) / 1e9
                steps.append((key, start_s, end_s, nbytes))
                if nbytes and key[2] not in files:  # a file counted once
                    files.add(key[2])
                    reads.append((start_s, end_s, nbytes))
            reads.sort(key=lambda r: r[1])
            out.append(EarlierStartup(trace_id, end, (end - start) / 1e9, tuple(steps), tuple(reads), host_type))
        return out


def progress_of(path: str) -> tuple[tuple[int, int] | None, list[tuple[int, dict]]]:
    """One of our trace files as the estimate's checks read it: the root's (start, end) ns
    (None for a start-up that never ended) and its progress records' (time ns, attributes),
    in time order. For tests and benchmarks that hold an estimate against the outcome."""
    root: tuple[int, int] | None = None
    records: list[tuple[int, dict]] = []
    with open(path, "rb") as handle:
        for line in handle:
            for resource_spans in _list(json.loads(line), "resourceSpans"):
                for scope_spans in _list(resource_spans, "scopeSpans"):
                    for span in _list(scope_spans, "spans"):
                        start = _nanos(span.get("startTimeUnixNano"))
                        if start is None:  # no time to place it at (our spans always have one)
                            continue
                        if span.get("name") == semconv.SPAN_ROOT:
                            end = _nanos(span.get("endTimeUnixNano"))
                            root = (start, end) if end is not None else None
                        elif span.get("name") == semconv.SPAN_PROGRESS:
                            records.append((start, _attributes(span)))
    return root, sorted(records, key=lambda record: record[0])


# --- OTLP JSON, defensively --------------------------------------------------------------

def _one_document(lines: list) -> bool:
    """A file whose first line is not a whole JSON object is one pretty-printed document."""
    first = next((line.strip() for line in lines if line.strip()), b"")
    return len(lines) > 1 and not (first.startswith(b"{") and first.endswith(b"}"))


def _dict(value, key: str) -> dict:
    item = value.get(key) if isinstance(value, dict) else None
    return item if isinstance(item, dict) else {}


def _list(value, key: str) -> list:
    item = value.get(key) if isinstance(value, dict) else None
    return item if isinstance(item, list) else []


def _nanos(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1 << 63 else None
    if isinstance(value, str) and value.isdigit() and len(value) <= 19:
        return int(value)
    return None


def _attributes(holder) -> dict:
    """An OTLP attribute list as a dict of plain values (strings, bools, ints, doubles)."""
    out = {}
    for item in _list(holder, "attributes"):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        value = item.get("value")
        if not isinstance(value, dict):
            continue
        if isinstance(value.get("stringValue"), str):
            out[item["key"]] = value["stringValue"]
        elif isinstance(value.get("boolValue"), bool):
            out[item["key"]] = value["boolValue"]
        elif "intValue" in value:
            number = _nanos(value["intValue"]) if not isinstance(value["intValue"], int) else value["intValue"]
            if isinstance(number, int) and not isinstance(number, bool):
                out[item["key"]] = number
        elif isinstance(value.get("doubleValue"), (int, float)) and not isinstance(value.get("doubleValue"), bool):
            out[item["key"]] = float(value["doubleValue"])
    return out
