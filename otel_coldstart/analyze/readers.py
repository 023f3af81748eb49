"""Readers: trace files in, :class:`Span` records out; the format is detected, not asked.

Understood (docs/analysis.md lists the quirks of each):

- OTLP JSON: one document, or JSON Lines as the Collector's file exporter and
  otel-coldstart write; Jaeger v2's ``{"result": ...}``; Tempo's ``{"batches": ...}`` and
  ``{"trace": ...}`` with base64 ids and enum names.
- Jaeger JSON: ``{"data": [trace, ...]}`` or a bare trace object.
- Zipkin v2 JSON: a flat array of spans.

JSON Lines are streamed one line at a time, so a large Collector file never exists as one
Python object; a single JSON document above ``max_bytes`` is refused (``too_large``)
rather than parsed into several times its size in memory.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterator

from .._regular_files import is_regular_file, open_regular_fd
from ._values import TraceReadError
from .integrity import repair, validate
from .interrupted import complete_killed
from .model import Span
from .read_jaeger import is_jaeger_envelope, is_jaeger_trace, spans_from_jaeger_envelope, spans_from_jaeger_trace
from .read_otlp import is_otlp, spans_from_otlp
from .read_otlp_fast import reset_ids, spans_from_line
from .read_zipkin import is_zipkin, spans_from_zipkin
from .storage_floor import StorageFloor, floor_from_document, is_floor_document

__all__ = ["TraceReadError", "ReadResult", "read_trace_file", "read_trace", "read_documents",
           "DEFAULT_MAX_BYTES"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024  # single JSON documents; raise with --max-input-mb


@dataclass(frozen=True)
class ReadResult:
    spans: list[Span]
    format: str  # otlp | otlp-lines | tempo | jaeger | zipkin (several joined by "+") | floor
    warnings: list[str]
    skipped: list[str] = field(default_factory=list)  # "line N: why" for JSON lines left out
    floor: StorageFloor | None = None  # an `otel-coldstart floor --json` document, not a trace


Progress = Callable[[int, int], None]  # (bytes read so far, file size)


def read_trace_file(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Span]:
    return read_trace(path, max_bytes).spans


def read_trace(path: str, max_bytes: int = DEFAULT_MAX_BYTES, progress: Progress | None = None,
               repair_links: bool = True) -> ReadResult:
    """One file. ``repair_links=False`` leaves duplicate ids and parent links as read, for a
    caller that checks integrity across several files at once (cli/_inputs.py)."""
    # A device (/dev/zero reports size 0, so no size limit would apply), a FIFO with no
    # writer (open blocks forever) or a socket is refused without being read, or opened.
    if os.path.exists(path) and not is_regular_file(path):
        raise TraceReadError(f"{path}: not a regular file (a device, FIFO or socket); save the trace to a file",
                             "unreadable")
    try:
        handle = open(open_regular_fd(path), "rb")
    except OSError as exc:
        raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}", "unreadable") from None
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            try:
                spans, formats, skipped, floor = _read_handle(handle, size, max_bytes, path, progress)
            finally:
                reset_ids()  # the fast path's id strings are shared within one file only
        except OSError as exc:
            raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}", "unreadable") from None
        except TraceReadError as exc:
            if str(exc).startswith(path) or exc.kind == "unreadable":
                raise
            raise TraceReadError(f"{path}: {exc}", exc.kind) from None
    if floor is not None:
        return ReadResult([], "floor", [], [], floor)
    try:
        spans, untrue = _validated(spans)
    except TraceReadError as exc:
        raise TraceReadError(f"{path}: {exc}", exc.kind) from None
    warnings = [f"{where} skipped" for where in skipped] + untrue
    skipped += untrue  # left out or repaired: the report is made from less than the file says
    if repair_links:
        spans, repairs = repair(complete_killed(spans))  # a killed start-up, rebuilt from its progress records
        warnings += repairs
    return ReadResult(spans, "+".join(sorted(formats)), warnings, skipped)


PROGRESS_EVERY_S = 0.25
FIRST_LINE_PROBE = 64 * 1024 * 1024  # a file over the limit is only read if it is JSON Lines


def _read_handle(handle: BinaryIO, size: int, max_bytes: int, path: str,
                 progress: Progress | None = None) -> tuple[list[Span], set, list[str], StorageFloor | None]:
    # Whether the file is JSON Lines shows in its first line. For a file over the limit, look
    # at no more than the probe: a 500 MB single document is refused without reading it.
    probe = max_bytes if size <= max_bytes else min(max_bytes, FIRST_LINE_PROBE)
    first = handle.readline(probe + 1)
    rest_start = handle.tell()
    if first.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark, as some Windows tools write
        first = first[3:]
    lines_mode = False
    sample = first  # a line that shows the file's kind of lines
    if size > len(first):
        if first.strip() and _complete_json(first):
            lines_mode = bool(handle.read(4096).strip())
        else:
            # A first line that is not JSON (or blank): junk before JSON Lines (a log line, the
            # tail of a batch cut by a rotation), or one document spread over lines. JSON Lines
            # when a line after it is a whole trace of its own.
            found = _trace_line(handle, probe)
            if found is not None:
                lines_mode, sample = True, found
        handle.seek(rest_start)
    spans: list[Span] = []
    formats: set = set()
    skipped: list[str] = []
    if lines_mode:
        # A bad line (a truncated last batch, a line from another tool, the first line or any
        # other) is left out with a warning naming it; the other lines still make a report
        # (docs/cli.md: exit 12).
        last_report = time.monotonic()
        done = 0
        fast = b'"resourceSpans"' in sample  # OTLP lines: try the typed decoder first
        for number, line in enumerate(_lines(handle, first, max_bytes), start=1):
            done += len(line)
            if progress is not None and time.monotonic() - last_report >= PROGRESS_EVERY_S:
                progress(done, size)
                last_report = time.monotonic()
            if line.strip():
                try:
                    batch = spans_from_line(line) if fast else None
                    if batch is not None:
                        formats.add("otlp")
                    else:
                        batch = list(_spans(_loads(line, f"line {number}"), formats, f"line {number}: "))
                    spans.extend(batch)  # all of a line's spans or none
                except TraceReadError as exc:
                    if exc.kind != "invalid":
                        raise
                    message = str(exc)
                    skipped.append(message if message.startswith("line ") else f"line {number}: {message}")
        if not spans and skipped and not formats:
            raise TraceReadError(skipped[0])
        if formats == {"otlp"}:
            formats = {"otlp-lines"}
        return spans, formats, skipped, None
    if size > max_bytes:
        raise TraceReadError(
            f"{path}: {size / 2**20:.0f} MiB is over the {max_bytes / 2**20:.0f} MiB limit for one JSON "
            "document (write JSON Lines, which are streamed, or raise the limit with --max-input-mb)",
            "too_large")
    data = first + handle.read()
    if not data.strip():
        raise TraceReadError("empty file")
    doc = _loads(data, "the file")
    del data
    if is_floor_document(doc):
        return [], {"floor"}, [], floor_from_document(doc, path)
    spans.extend(_spans(doc, formats, ""))
    return spans, formats, [], None


def _lines(handle: BinaryIO, first: bytes, max_bytes: int) -> Iterator[bytes]:
    yield first
    while True:
        line = handle.readline(max_bytes + 1)
        if not line:
            return
        if len(line) > max_bytes:
            raise TraceReadError(f"a JSON line is over the {max_bytes / 2**20:.0f} MiB limit", "too_large")
        yield line


TRACE_LINE_PROBE = 8  # lines looked at after a first line that is not JSON


def _trace_line(handle: BinaryIO, limit: int) -> bytes | None:
    """The first of the next few lines that is a trace on its own (JSON of a trace's shape),
    or None: a line of a document spread over lines is never a whole trace."""
    for _ in range(TRACE_LINE_PROBE):
        line = handle.readline(limit + 1)
        if not line:
            return None
        if not line.strip() or len(line) > limit:
            continue
        try:
            doc = json.loads(line)
            if isinstance(doc, (dict, list)) and doc:
                for _ in _spans(doc, set(), ""):
                    break
                return line
        except (ValueError, RecursionError, TraceReadError):
            continue
    return None


def _complete_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _loads(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated"):
            raise TraceReadError(f"{where} is truncated JSON ({exc.msg})") from None
        raise TraceReadError(f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError:
        raise TraceReadError(f"{where} is not JSON (not UTF-8 text)") from None
    except RecursionError:
        raise TraceReadError(f"{where} is nested too deeply to be a trace") from None
    except ValueError as exc:  # e.g. an integer literal with thousands of digits
        raise TraceReadError(f"{where} holds a number Python refuses: {str(exc)[:60]}") from None


def _spans(doc: Any, formats: set, where: str) -> Iterator[Span]:
    for _ in range(3):  # API envelopes: {"result": ...} (Jaeger v2), {"trace": ...} (Tempo v2)
        if isinstance(doc, dict) and len(doc) <= 2 and isinstance(doc.get("result", doc.get("trace")), dict):
            doc = doc.get("result", doc.get("trace"))
    if is_otlp(doc):
        formats.add("tempo" if "batches" in doc else "otlp")
        return spans_from_otlp(doc)
    if is_jaeger_envelope(doc):
        formats.add("jaeger")
        return spans_from_jaeger_envelope(doc)
    if is_jaeger_trace(doc):
        formats.add("jaeger")
        return spans_from_jaeger_trace(doc)
    if is_zipkin(doc):
        formats.add("zipkin")
        return spans_from_zipkin(doc)
    if isinstance(doc, list) and not doc:
        formats.add("zipkin")
        return iter(())
    if isinstance(doc, dict) and isinstance(doc.get("traces"), list):
        raise TraceReadError(f"{where}a trace search result (trace ids only), not a trace")
    shape = type(doc).__name__ if not isinstance(doc, dict) else "object with keys " + ", ".join(
        sorted(map(str, doc))[:5])
    raise TraceReadError(f"{where}not a trace: expected OTLP, Jaeger or Zipkin JSON, got {shape}")


def _validated(spans: list[Span]) -> tuple[list[Span], list[str]]:
    """integrity.validate, and a refusal when no span at all can be true."""
    kept, untrue = validate(spans)
    if spans and not kept:
        raise TraceReadError(f"no span in it can be true ({untrue[0]})")
    return kept, untrue


def read_documents(docs: list, source: str) -> ReadResult:
    """Parsed JSON documents (e.g. live API answers) into repaired spans."""
    formats: set = set()
    spans: list[Span] = []
    try:
        for doc in docs:
            spans.extend(_spans(doc, formats, ""))
        spans, untrue = _validated(spans)
    except TraceReadError as exc:
        raise TraceReadError(f"{source}: {exc}", exc.kind) from None
    repaired, warnings = repair(complete_killed(spans))
    return ReadResult(repaired, "+".join(sorted(formats)), untrue + warnings, untrue)
