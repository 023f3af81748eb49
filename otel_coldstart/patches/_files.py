"""One checkpoint file being read: its ``deserialize`` span and its cold-cache evidence.

Shared by the torch.load and safetensors patches, which differ only in how they learn the
path and when the read ends.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from typing import Any

from .. import own_cost, probes, semconv
from .._errors import internal_errors, report_internal_error
from .._regular_files import open_regular, regular_file_stat
from ..verdicts import cache_state_from_reads, cache_state_from_residency, combine_cache_states
from . import _storage
from ._tensor_bytes import tensor_nbytes

_SHARD_NAME = re.compile(r"(\d+)-of-(\d+)")
_index_cache: dict[str, tuple[float, dict[str, int]]] = {}
_index_lock = threading.Lock()


def detect_format(path: str) -> str | None:
    try:
        with open_regular(path) as handle:
            head = handle.read(8)
    except OSError:
        return None
    if head[:4] == b"PK\x03\x04":
        return semconv.FORMAT_TORCH_ZIP
    if len(head) == 8 and path.endswith(".safetensors"):
        return semconv.FORMAT_SAFETENSORS
    return semconv.FORMAT_TORCH_LEGACY


def shard_position(path: str) -> tuple[int | None, int | None]:
    """(index, count) of a shard: from a Hugging Face ``*.index.json`` beside it, else from a
    ``-00002-of-00004`` file name (index counted from 0)."""
    directory, name = os.path.split(os.path.abspath(path))
    positions = _index_positions(directory)
    if name in positions:
        return positions[name], len(set(positions.values()))
    return _position_from_name(name)


@functools.lru_cache(maxsize=4096)  # a start-up of 2,000 files asks once per file name
def _position_from_name(name: str) -> tuple[int | None, int | None]:
    match = None
    for match in _SHARD_NAME.finditer(name):  # noqa: B007 - the last match is wanted
        pass
    if match is not None:
        number, total = int(match.group(1)), int(match.group(2))
        if 1 <= number <= total:
            return number - 1, total
    return None, None


_index_names_cache: dict[str, tuple[int, list[str]]] = {}  # directory -> (its mtime, *.index.json names)


def _index_names(directory: str) -> list[str]:
    """The ``*.index.json`` files of a directory, listed again only when it changed (a
    listing costs 20-40 us here, paid per checkpoint file otherwise)."""
    try:
        mtime = os.stat(directory).st_mtime_ns
        with _index_lock:
            cached = _index_names_cache.get(directory)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        names = [n for n in os.listdir(directory) if n.endswith(".index.json")]
    except OSError:
        return []
    with _index_lock:
        _index_names_cache[directory] = (mtime, names)
    return names


def _index_positions(directory: str) -> dict[str, int]:
    names = _index_names(directory)
    if not names:
        return {}
    positions: dict[str, int] = {}
    for name in sorted(names):
        full = os.path.join(directory, name)
        try:
            mtime = os.stat(full).st_mtime
        except OSError:
            continue
        with _index_lock:
            cached = _index_cache.get(full)
        if cached is None or cached[0] != mtime:
            try:
                with open_regular(full, "r", encoding="utf-8") as handle:
                    weight_map = json.load(handle).get("weight_map") or {}
                files = sorted({str(v) for v in weight_map.values()})
                cached = (mtime, {f: i for i, f in enumerate(files)})
            except (OSError, ValueError, AttributeError):
                cached = (mtime, {})
            with _index_lock:
                _index_cache[full] = cached
        positions.update(cached[1])
    return positions


class FileRead:
    """The span of one checkpoint file's read, plus the storage reads charged to it.

    Reads are charged per thread by the callers (``add_io``), so a file whose tensors are
    fetched on a thread pool still gets every byte its reads pulled from storage.
    """

    def __init__(self, session, path: str | None, fmt: str | None, api: str, *,
                 size: int | None = None, make_current: bool = True, start_ns: int | None = None,
                 parent=None, lazy_reads: bool = False, opened_unseen: bool = False) -> None:
        """``lazy_reads``: the loader maps the file and its pages are read on first touch, by
        whichever thread touches them, possibly after this span (safe_open handles).
        ``opened_unseen``: the loader opened the file (and read its header) before any hook
        of ours ran, so residency measured now is already after that read."""
        # The span starts before the file facts are gathered: that work of ours lands inside
        # it, where the report says it (own_cost.py), not in whatever encloses the read.
        start_ns = start_ns or time.time_ns()
        self.after_end_ns = 0  # our own work after the span's end (its figure, its export)
        self.session = session
        self.path = path
        self.read_bytes = 0
        self.major_faults = 0
        self.bytes = 0
        self.last_ns = start_ns or time.time_ns()
        self._lock = threading.Lock()
        self.trusted = False
        self.resident_ratio = None
        self.lazy_reads = lazy_reads
        self.stored = None  # the file's storage facts (_storage.StoredFile), shared by its spans
        self.carries_figure = True  # the file's first span: it carries the storage figure
        attrs: dict[str, Any] = {semconv.FILE_API: api}
        if path is not None:
            attrs[semconv.FILE_PATH] = path
        # A FIFO, socket or device is never opened or read by us (it is the host's stream).
        facts = regular_file_stat(path) if path is not None else None  # one stat for every fact below
        if path is not None and facts is not None:
            with internal_errors("file facts"):
                # Residency first: anything we read ourselves (a format sniff) would warm it.
                self.stored, self.carries_figure, self.resident_ratio = _storage.start_file_span(
                    session, path, before_open=not opened_unseen, facts=facts)
                if self.resident_ratio is None or self.resident_ratio < _storage.SETTLE_AT_ONCE_FROM:
                    # Pages of it may come from storage, in this read or in the casts and copies
                    # that touch its mapped tensors later: count each call's reads from now on.
                    session.recorder.expect_storage_reads()
                self.trusted = (probes.io_accounting_available() and probes.filesystem_trusted(self.stored.fs_type)
                                if self.stored is not None else probes.read_bytes_trusted(path))
                size = facts.st_size
                if fmt is None:
                    fmt = detect_format(path)
                # Every file read takes a place in the order, so that a file without an index
                # or shard name gets its position among all of them (never a second #0).
                order = session.file_order(path)
                index, count = shard_position(path)
                if index is None:
                    index = order
                attrs[semconv.SHARD_INDEX] = index
                if count is not None:
                    attrs[semconv.SHARD_COUNT] = count
        if fmt:
            attrs[semconv.FILE_FORMAT] = fmt
        if self.resident_ratio is not None:
            attrs[semconv.CACHE_RESIDENT_RATIO] = round(self.resident_ratio, 4)
        self.size = size
        if size is not None:
            attrs[semconv.FILE_SIZE] = size
        self.container = session.start_container(semconv.PHASE_DESERIALIZE, attrs,
                                                 make_current=make_current, start_ns=start_ns, parent=parent)
        # Cut short (exit, SIGTERM) mid-read: end with the evidence gathered so far.
        self.container.on_interrupt = self._interrupted
        if getattr(session, "progress", None) is not None:  # its bytes show progress inside the file
            session.progress.file_read_opened(self)

    @property
    def span_context(self):
        return self.container.span_context

    def add_io(self, read_bytes: int, major_faults: int, nbytes: int = 0, end_ns: int | None = None) -> None:
        with self._lock:
            self.read_bytes += read_bytes
            self.major_faults += major_faults
            self.bytes += nbytes
            if end_ns is not None and end_ns > self.last_ns:
                self.last_ns = end_ns

    def _interrupted(self, end_ns: int) -> None:
        # The context stays for the reader's own exit to detach (see ContainerSpan.interrupt).
        self.finish(end_ns=end_ns, attributes={semconv.INTERRUPTED: True}, detach=False)

    def finish(self, error: BaseException | None = None, *, end_ns: int | None = None,
               reads_deferred: bool = False, attributes: dict | None = None, detach: bool = True) -> None:
        """End the span. ``reads_deferred``: the loader mapped the file and will read it on
        first touch (torch.load(mmap=True)), so this span's reads say nothing of the cache."""
        began = time.perf_counter_ns()
        end = end_ns or time.time_ns()
        attrs: dict[str, Any] = dict(attributes or {})
        expected = self.bytes or self.size or 0
        if self.bytes:
            attrs[semconv.BYTES] = self.bytes
        elif self.size:
            attrs[semconv.BYTES] = self.size
        duration_s = (end - self.container.start_ns) / 1e9
        if attrs.get(semconv.BYTES) and duration_s > 0:
            attrs[semconv.THROUGHPUT] = attrs[semconv.BYTES] / duration_s
        from_reads = from_residency = None
        if self.trusted:
            attrs[semconv.IO_READ_BYTES] = self.read_bytes
            attrs[semconv.IO_MAJOR_FAULTS] = self.major_faults
            if not reads_deferred:
                from_reads = cache_state_from_reads(self.read_bytes, expected)
        if self.resident_ratio is not None:
            from_residency = cache_state_from_residency(self.resident_ratio)
        state = combine_cache_states(from_reads, from_residency)
        verdict_evidence = [name for name, found in (("read_bytes", from_reads), ("mincore", from_residency))
                            if found]
        if state is not None:
            attrs[semconv.CACHE_STATE] = state
        if detach:  # stop being current now, on this thread, whenever the span ends
            self.container.detach()
        self._end_with_storage_figure(attrs, verdict_evidence, error, end, lazy=self.lazy_reads or reads_deferred)
        self.after_end_ns += time.perf_counter_ns() - began

    def _end_with_storage_figure(self, attrs: dict, verdict_evidence: list, error, end_ns: int, lazy: bool) -> None:
        """End the span now, at the read's end, with the file's storage figure known now (see
        _storage); a figure settled later leaves as a settlement record under the span."""
        ended: list = []

        def with_evidence(figure_attrs: dict, figure_evidence: list) -> dict:
            merged = dict(figure_attrs)
            evidence = verdict_evidence + [t for t in figure_evidence if t not in verdict_evidence]
            if evidence:
                merged[semconv.CACHE_EVIDENCE] = "+".join(evidence)
            return merged

        def end_span(figure_attrs: dict, figure_evidence: list) -> None:
            if ended:
                return
            ended.append(True)
            attrs.update(with_evidence(figure_attrs, figure_evidence))
            self.container.finish(attrs, error, end_ns=end_ns, detach=False)  # detached above, or not ours to

        def settled_later(figure_attrs: dict, figure_evidence: list) -> None:
            self.session.emit_record(semconv.SPAN_SETTLEMENT, self.container.span_context, time.time_ns(),
                                     with_evidence(figure_attrs, figure_evidence))

        def record_under_span(name: str, record_attrs: dict) -> None:  # first-use records, after ready()
            self.session.emit_record(name, self.container.span_context, time.time_ns(), record_attrs)

        if not self.carries_figure:
            end_span({semconv.CACHE_STORAGE_READ_UNKNOWN: _storage.UNKNOWN_COUNTED_ON_FIRST_SPAN}, [])
            return
        try:
            _storage.finish_with_figure(self.session, self.stored, self.read_bytes if self.trusted else None,
                                        not lazy, end_span, settled_later, record_under_span)
        except Exception:
            report_internal_error("storage figure")
            end_span({}, [])


class _FileReadsHere(threading.local):
    depth = 0  # file reads of ours open on this thread; a class default: reading it raises nothing


_local = _FileReadsHere()


def in_file_read() -> bool:
    """True inside a traced file read on this thread (load_file's own safe_open handle
    must not open a second span for the same file)."""
    return _local.depth > 0


def charge_own_cost(session, began_ns: int, host_ns: int = 0, read: FileRead | None = None) -> None:
    """A file hook's own cost (own_cost.py): ``perf_counter_ns()`` from ``began_ns`` to now,
    less ``host_ns``, the host's call inside it. Charged where it lands: ``deserialize`` (the
    file's span), except what ending ``read``'s span did after its end time (between spans)."""
    spent = time.perf_counter_ns() - began_ns - host_ns
    cost = own_cost.of(session)
    after = min(spent, read.after_end_ns) if read is not None else 0
    if after > 0 and read is not None:
        read.after_end_ns = 0  # charged once
        cost.add(semconv.UNATTRIBUTED, after)
    cost.add(semconv.PHASE_DESERIALIZE, spent - after)


def traced_read(open_read, wrapped, args, kwargs, finish=None):
    """Run the host's ``wrapped(*args, **kwargs)`` inside the span ``open_read()`` starts.

    The host call is made exactly once, outside our error handling; its exception is
    re-raised unchanged after the span records it. ``finish(read)`` returns extra keyword
    arguments for :meth:`FileRead.finish`.
    """
    began = time.perf_counter_ns()
    read = io_before = None
    with internal_errors("file read start"):
        read = open_read()
        io_before = probes.thread_io()
    _local.depth += 1
    host_began = time.perf_counter_ns()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        host_ns = time.perf_counter_ns() - host_began
        _local.depth -= 1
        _close(read, io_before, exc, finish)
        if read is not None:
            charge_own_cost(read.session, began, host_ns, read)
        raise
    host_ns = time.perf_counter_ns() - host_began
    _local.depth -= 1
    if read is not None:
        with internal_errors("file read bytes"):
            read.bytes = read.bytes or _tensor_bytes(result)
    _close(read, io_before, None, finish)
    if read is not None:
        charge_own_cost(read.session, began, host_ns, read)
    return result


def _tensor_bytes(result) -> int:
    """Bytes of the tensors a whole-file load returned (a state dict); 0 if not a dict of
    tensors, and the file size stands in."""
    if not isinstance(result, dict):
        return 0
    total = 0
    for value in result.values():
        if hasattr(type(value), "nbytes") and hasattr(value, "layout"):  # a tensor, of any layout
            total += tensor_nbytes(value)
    return total


def _close(read, io_before, error, finish) -> None:
    if read is None or io_before is None:
        return
    with internal_errors("file read end"):
        io_after = probes.thread_io()
        read.add_io(io_after.read_bytes - io_before.read_bytes, io_after.major_faults - io_before.major_faults)
        read.finish(error, **(finish(read) if finish else {}))
