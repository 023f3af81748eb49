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

import io
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

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
    caller that checks integrity across several files at once."""
    reader = BatchReader(path, max_bytes, progress)
    spans: list[Span] = [span for batch in reader for span in batch.spans]
    facts = reader.facts
    if facts.floor is not None:
        return ReadResult([], "floor", [], [], facts.floor)
    skipped = list(facts.skipped)
    try:
        spans, untrue = _validated(spans)
    except TraceReadError as exc:
        raise TraceReadError(f"{path}: {exc}", exc.kind) from None
    warnings = [f"{where} skipped" for where in skipped] + untrue
    skipped += untrue  # left out or repaired: the report is made from less than the file says
    if repair_links:
        spans, repairs = repair(complete_killed(spans))  # a killed start-up, rebuilt from its progress records
        warnings += repairs
    return ReadResult(spans, facts.format, warnings, skipped)


@dataclass(frozen=True)
class Batch:
    """The spans of one JSON line, or of a whole document, and where it lies in its file
    (for :func:`reread`)."""

    spans: list[Span]
    offset: int
    length: int


@dataclass
class FileFacts:
    formats: set = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)  # "line N: why" for JSON lines left out
    floor: StorageFloor | None = None

    @property
    def format(self) -> str:
        return "+".join(sorted(self.formats))


class BatchReader:
    """A file's spans batch by batch, as read (not yet checked or repaired): a JSON Lines
    file line by line, so that a caller may let go of a trace once it is whole; a document as
    one batch. Raises TraceReadError as read_trace does; ``facts`` is complete once the
    batches are."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES, progress: Progress | None = None,
                 part: Part | None = None) -> None:
        self.path, self.max_bytes, self.progress, self.part = path, max_bytes, progress, part
        self.facts = FileFacts()

    def __iter__(self) -> Iterator[Batch]:
        path = self.path
        handle, size = _open(path)
        with handle:
            try:
                try:
                    if self.part is None or self.part.start == 0:
                        end = None if self.part is None else self.part.end
                        yield from _read_handle(handle, size, self.max_bytes, path, self.progress, self.facts, end)
                    else:
                        yield from _read_part(handle, self.part, self.max_bytes, self.facts)
                finally:
                    reset_ids()  # the fast path's id strings are shared within one file only
            except OSError as exc:
                raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}", "unreadable") from None
            except TraceReadError as exc:
                if str(exc).startswith(path) or exc.kind == "unreadable":
                    raise
                raise TraceReadError(f"{path}: {exc}", exc.kind) from None


READ_BUFFER = 1 << 20


def _open(path: str) -> tuple[BinaryIO, int]:
    """``path`` for reading, and its size. A file that fits in the read buffer is read whole
    at once, and its lines found in memory: the plugin writes one file per start-up, tens of
    KiB each, and a buffered reader set up for each of 10,000 of them costs more than their
    lines (its first line is scanned byte by byte as it fills the buffer)."""
    try:
        fd = open_regular_fd(path)
    except OSError as exc:
        # A device (/dev/zero reports size 0, so no size limit would apply), a FIFO with no
        # writer (open blocks forever) or a socket is refused without being read, or opened
        # (open_regular_fd looks before it opens); only then is it worth saying which.
        if os.path.exists(path) and not is_regular_file(path):
            raise TraceReadError(f"{path}: not a regular file (a device, FIFO or socket); save the trace to a file",
                                 "unreadable") from None
        raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}", "unreadable") from None
    try:
        size = os.fstat(fd).st_size
        if size <= READ_BUFFER:
            data = _read_whole(fd, size)
            if data is not None:
                os.close(fd)
                return io.BytesIO(data), size
            os.lseek(fd, 0, os.SEEK_SET)  # it grew past the buffer meanwhile: read it as a big one
        # A large buffer: lines of tens of KiB are found in it by one memchr, not pieced
        # together from 8 KiB reads (3x faster reading a Collector file).
        return open(fd, "rb", buffering=READ_BUFFER), size
    except OSError as exc:
        os.close(fd)
        raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}", "unreadable") from None
    except BaseException:
        os.close(fd)
        raise


def _read_whole(fd: int, size: int) -> bytes | None:
    """All of ``fd`` to its end, or None should it hold more than the ``size`` it had when it
    was opened (it grew meanwhile). Reads of exactly what is expected: a read of the whole
    buffer's size would allocate (and map fresh pages for) 1 MiB for each small file."""
    chunks: list[bytes] = []
    held = 0
    while held <= size:
        chunk = os.read(fd, size + 1 - held)
        if not chunk:
            return b"".join(chunks)  # one chunk, the usual case: that very object, not a copy
        chunks.append(chunk)
        held += len(chunk)
    return None


def reread(path: str, batches: list[tuple[int, int]], traces: set[str]) -> list[Span]:
    """The spans of ``traces`` in the batches of ``path`` at (offset, length): what a caller
    that let go of them reads again, and only that."""
    spans: list[Span] = []
    handle, _ = _open(path)
    with handle:
        try:
            for offset, length in batches:
                handle.seek(offset)
                data = handle.read(length)
                if offset == 0 and data.startswith(b"\xef\xbb\xbf"):
                    data = data[3:]
                batch = spans_from_line(data) if b'"resourceSpans"' in data[:4096] else None
                if batch is None:
                    batch = list(_spans(_loads(data, f"offset {offset}"), set(), ""))
                spans.extend(s for s in batch if s.trace_id in traces)
        finally:
            reset_ids()
    return spans


PROGRESS_EVERY_S = 0.25
FIRST_LINE_PROBE = 64 * 1024 * 1024  # a file over the limit is only read if it is JSON Lines


@dataclass(frozen=True)
class Part:
    """A byte range of a JSON Lines file, from a line's start to another's: a big file read
    by several processes at once (cli/_inputs.py). ``fast``: the file's lines are OTLP."""

    start: int
    end: int
    fast: bool


def split_lines_file(path: str, parts: int, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Part] | None:
    """``parts`` ranges of about equal size, each starting at a line, when ``path`` is JSON
    Lines (as the readers would take it); None for anything else (read whole)."""
    try:
        handle, size = _open(path)
        with handle:
            first = handle.readline(min(max_bytes, FIRST_LINE_PROBE) + 1)
            if first.startswith(b"\xef\xbb\xbf"):
                first = first[3:]
            if not first.strip() or not _complete_json(first) or size <= len(first):
                return None
            fast = b'"resourceSpans"' in first
            starts = [0]
            for number in range(1, parts):
                handle.seek(max(size * number // parts, starts[-1]))
                if starts[-1] or handle.tell():
                    handle.readline()  # to the next line's start
                position = handle.tell()
                if position >= size or position <= starts[-1]:
                    break
                starts.append(position)
    except (OSError, TraceReadError):
        return None
    ends = starts[1:] + [size]
    return [Part(start, end, fast) for start, end in zip(starts, ends)]


def _read_part(handle: BinaryIO, part: Part, max_bytes: int, facts: FileFacts) -> Iterator[Batch]:
    """The lines of a part after the first (the first part is read by _read_handle, which
    also decides the file is JSON Lines). Lines are numbered from the file's start, counted
    only if one is skipped (the count reads the part's prefix)."""
    handle.seek(part.start)
    number_of = _line_counter(handle, part.start)
    for offset, length, line in _lines_from(handle, part.start, part.end, max_bytes):
        batch = _line_batch(line, part.fast, facts, lambda: number_of(offset), max_bytes)  # noqa: B023 - called within this iteration
        if batch is not None:
            yield Batch(batch, offset, length)


def _line_counter(handle: BinaryIO, start: int) -> Callable[[int], int]:
    """offset -> the line's number (1-based) in the file; the lines before ``start`` are
    counted once, when first asked, then the counter moves on from there."""
    counted: list[int] = []  # [line number at start]

    def number(offset: int) -> int:
        if not counted:
            position = handle.tell()
            handle.seek(0)
            lines, left = 0, start
            while left > 0:
                block = handle.read(min(left, 1 << 24))
                if not block:
                    break
                lines += block.count(b"\n")
                left -= len(block)
            counted.append(lines + 1)
            handle.seek(position)
        handle_position = handle.tell()
        handle.seek(start)
        between = handle.read(offset - start).count(b"\n") if offset > start else 0
        handle.seek(handle_position)
        return counted[0] + between

    return number


def _line_batch(line: bytes | None, fast: bool, facts: FileFacts, number: Callable[[], int],
                max_bytes: int) -> list[Span] | None:
    """The spans of one JSON line, or None for a line left out (noted in ``facts``)."""
    if line is None:
        facts.skipped.append(f"line {number()}: over the {max_bytes / 2**20:.0f} MiB limit for one line "
                             "(raise it with --max-input-mb)")
        return None
    if not line or line.isspace():  # a blank line (not line.strip(): that copies every line)
        return None
    try:
        batch = spans_from_line(line) if fast else None
        if batch is not None:
            facts.formats.add("otlp")
            return batch
        where = f"line {number()}"
        return list(_spans(_loads(line, where), facts.formats, f"{where}: "))
    except TraceReadError as exc:
        if exc.kind != "invalid":
            raise
        message = str(exc)
        facts.skipped.append(message if message.startswith("line ") else f"line {number()}: {message}")
        return None


def _read_handle(handle: BinaryIO, size: int, max_bytes: int, path: str,
                 progress: Progress | None, facts: FileFacts, end: int | None = None) -> Iterator[Batch]:
    # Whether the file is JSON Lines shows in its first line. For a file over the limit, look
    # at no more than the probe: a 500 MB single document is refused without reading it.
    probe = max_bytes if size <= max_bytes else min(max_bytes, FIRST_LINE_PROBE)
    first = handle.readline(probe + 1)
    rest_start = handle.tell()
    if first.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark, as some Windows tools write
        first = first[3:]
    lines_mode = False
    sample = first  # a line that shows the file's kind of lines
    first_batch = None  # the first line's spans, when decoding it showed it is whole JSON
    if size > len(first):
        if b'"resourceSpans"' in first:  # the typed decoder is the cheapest test of a whole line
            try:
                first_batch = spans_from_line(first)
            except TraceReadError:
                first_batch = None
        if first_batch is not None or (first.strip() and _complete_json(first)):
            lines_mode = bool(handle.read(4096).strip())
        else:
            # A first line that is not JSON (or blank): junk before JSON Lines (a log line, the
            # tail of a batch cut by a rotation), or one document spread over lines. JSON Lines
            # when a line after it is a whole trace of its own.
            found = _trace_line(handle, probe)
            if found is not None:
                lines_mode, sample = True, found
        handle.seek(rest_start)
    formats, skipped = facts.formats, facts.skipped
    if lines_mode:
        # A bad line (a truncated last batch, a line from another tool, the first line or any
        # other) is left out with a warning naming it; the other lines still make a report
        # (docs/cli.md: exit 12).
        last_report = time.monotonic()
        fast = b'"resourceSpans"' in sample  # OTLP lines: try the typed decoder first
        read_any = False
        for number, (offset, length, line) in enumerate(_lines(handle, first, rest_start, max_bytes), start=1):
            if end is not None and offset >= end:
                break  # the next part's (split_lines_file)
            if progress is not None and time.monotonic() - last_report >= PROGRESS_EVERY_S:
                progress(offset, size)
                last_report = time.monotonic()
            batch: list[Span] | None
            if number == 1 and first_batch is not None:
                batch = first_batch
                formats.add("otlp")
            else:
                batch = _line_batch(line, fast, facts, lambda: number, max_bytes)  # noqa: B023 - called within this iteration
            if batch is not None:
                read_any = read_any or bool(batch)
                yield Batch(batch, offset, length)  # all of a line's spans or none
        if end is not None:
            return  # this file's verdict on its lines (none readable) needs all its parts
        if not read_any and skipped and not formats:
            raise TraceReadError(skipped[0])
        if formats == {"otlp"}:
            formats.discard("otlp")
            formats.add("otlp-lines")
        return
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
        formats.add("floor")
        facts.floor = floor_from_document(doc, path)
        return
    yield Batch(list(_spans(doc, formats, "")), 0, size)


def _lines(handle: BinaryIO, first: bytes, rest_start: int,
           max_bytes: int) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, length in the file, line) for each line; the first as already read (a
    byte-order mark taken off it, so its length in the file is its end). A line over
    ``max_bytes`` is passed over without being held (line None): one bad line, not a bad file."""
    yield 0, rest_start, first
    yield from _lines_from(handle, rest_start, None, max_bytes)


def _lines_from(handle: BinaryIO, offset: int, end: int | None,
                max_bytes: int) -> Iterator[tuple[int, int, bytes | None]]:
    """_lines from ``offset`` (a line's start, where ``handle`` is) to ``end`` or the file's end."""
    while end is None or offset < end:
        line = handle.readline(max_bytes + 1)
        if not line:
            return
        length = len(line)
        if length > max_bytes:
            while not line.endswith(b"\n"):
                line = handle.readline(1 << 20)
                if not line:
                    break
                length += len(line)
            yield offset, length, None
        else:
            yield offset, length, line
        offset += length


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
