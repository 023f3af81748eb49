"""Many small checkpoint files folded into one aggregate instead of a span each (issue 39).

A per-layer or distributed checkpoint can be thousands of files of a few KiB. A span per file
(its start, ~17 attributes, its end, the in-flight board's hooks, its export, a page-cache
residency probe, its stats) cost more than reading the file: +160 us a 4 KiB file on a quiet
machine, charged to ``deserialize``. So a file of the start-up gets its own span (with the
whole cold-cache evidence: residency before the read, the settled storage figure, first use
after ready()) when it is at least ``FOLD_BELOW_BYTES``, or among the first
``SPANS_FOR_FIRST_SMALL`` smaller ones; every later small file joins one aggregate per
(parent span, api), like the tensor calls (recorder.py): its files (``coldstart.calls``),
tensor bytes, sizes, summed read time, the bytes storage delivered to them and their cache
verdicts counted by state. An aggregate reaches disk like the others: in the in-flight
monitor's progress records while it collects (a SIGKILL keeps it), as a span when its parent
ends or the start-up does.

The evidence per folded file is the thread's storage-read counter (one ``getrusage`` before
and one after the read, ~1.5 us each here): the file's verdict from the bytes storage
delivered against its size, as a span's ``read_bytes`` evidence. No residency probe (an open,
a cachestat, a close: ~30 us) and no settlement: a small file is read whole by its call
(safe_open's header read brings a file under the readahead window in at once), so reads on
other threads later are not expected; a safe_open handle's later get_tensor calls add their
own reads where the start-up expects any (``Recorder.sample_io``).
"""

from __future__ import annotations

import os
import threading
import time

from .. import own_cost, probes, semconv
from .._errors import report_internal_error
from .._regular_files import regular_file_stat
from ..verdicts import cache_state_from_reads
from . import _files

FOLD_BELOW_BYTES = 1 << 20  # a real shard (>= 1 MiB) always gets its span
SPANS_FOR_FIRST_SMALL = 32  # the first small files of a start-up keep theirs (a small model reads as before)

# A file's cache state -> the aggregate's count it adds to; no state (no honest figure) is unknown.
_STATE_COUNT: dict[str | None, str] = {semconv.CACHE_COLD: semconv.FILES_COLD, semconv.CACHE_PARTIAL: semconv.FILES_PARTIAL,
                                       semconv.CACHE_WARM: semconv.FILES_WARM}


_trusted_by_device: dict[int, bool] = {}  # st_dev -> its reads show in the thread's read counter
_detail_by_api: dict[str, tuple] = {}  # api -> (recorder detail, the aggregate's attributes): made once


def _trusted(device: int, path: str) -> bool:
    trusted = _trusted_by_device.get(device)
    if trusted is None:
        trusted = _trusted_by_device[device] = probes.io_accounting_available() and probes.filesystem_trusted(
            probes.filesystem_type_on(device, path))
    return trusted


def _detail(api: str) -> tuple:
    found = _detail_by_api.get(api)
    if found is None:  # the recorder copies the attributes into each aggregate it opens
        found = _detail_by_api[api] = (("folded_files", api), {
            semconv.FILES_FOLDED: True, semconv.FILE_API: api, semconv.FILE_FORMAT: semconv.FORMAT_SAFETENSORS,
            semconv.FILES_FOLD_BELOW: FOLD_BELOW_BYTES})
    return found


class _SmallFiles:
    """How many small files this start-up has read (per session: a new start-up starts at 0)."""

    __slots__ = ("lock", "seen")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen = 0


def folds(session, path) -> os.stat_result | None:
    """The file's stat when its read folds into the aggregate, else None (it gets a span)."""
    if not isinstance(path, str):
        return None
    facts = regular_file_stat(path)
    if facts is None or facts.st_size >= FOLD_BELOW_BYTES:
        return None
    small = session.state(__name__, _SmallFiles)
    with small.lock:
        small.seen += 1
        seen = small.seen
    return facts if seen > SPANS_FOR_FIRST_SMALL else None


class FoldedRead:
    """One small file's read, counted into its aggregate when it ends (``finish``). Quacks
    like _files.FileRead where a safe_open handle uses one (add_io, last_ns, path)."""

    __slots__ = ("session", "path", "api", "size", "trusted", "start_ns", "last_ns", "bytes", "read_bytes",
                 "major_faults", "thread", "_io_before", "finished", "after_end_ns")

    def __init__(self, session, path: str, facts: os.stat_result, api: str) -> None:
        self.session = session
        self.path = path
        self.api = api
        self.size = facts.st_size
        self.trusted = _trusted(facts.st_dev, path)
        self.start_ns = self.last_ns = time.time_ns()
        self.bytes = 0
        self.read_bytes = 0
        self.major_faults = 0
        self.thread = threading.get_ident()
        self._io_before: probes.ThreadIO | None = None
        self.finished = False
        self.after_end_ns = 0  # as FileRead's: no span, so none of our work is after one

    def io_before(self) -> None:
        """Before the call that reads the file (load_file; safe_open's header read)."""
        if self.trusted:
            self._io_before = probes.thread_io()

    def io_after(self) -> None:
        before, self._io_before = self._io_before, None
        if before is not None and threading.get_ident() == self.thread:
            after = probes.thread_io()
            self.read_bytes += after.read_bytes - before.read_bytes
            self.major_faults += after.major_faults - before.major_faults
            if self.read_bytes and self.session.recorder is not None:
                # Its later calls (a handle's get_tensor) and the start-up's may read too.
                self.session.recorder.expect_storage_reads()

    def add_io(self, read_bytes: int, major_faults: int, nbytes: int = 0, end_ns: int | None = None) -> None:
        self.read_bytes += read_bytes  # one handle's reads: on the thread that owns it
        self.major_faults += major_faults
        self.bytes += nbytes
        if end_ns is not None and end_ns > self.last_ns:
            self.last_ns = end_ns

    def finish(self, error: BaseException | None = None, *, end_ns: int | None = None,
               hook_times_itself: bool = True, **_ignored) -> None:
        """Count the file into the aggregate of its api under the span current now.
        ``hook_times_itself``: the hook calling this charges its own time (a safe_open
        ``__exit__``: charge_own_cost), so the recorder must not charge its part again."""
        if self.finished:
            return
        self.finished = True
        end = end_ns or time.time_ns()
        if end < self.start_ns:
            end = self.start_ns
        size = self.size
        storage = min(size, self.read_bytes) if self.trusted else None
        state = cache_state_from_reads(storage, size) if storage is not None and error is None else None
        failed = error is not None

        def count(aggregate) -> None:
            attrs = aggregate.attributes
            attrs[semconv.FILE_SIZE] = attrs.get(semconv.FILE_SIZE, 0) + size
            key = semconv.FILES_FAILED if failed else _STATE_COUNT.get(state, semconv.FILES_CACHE_UNKNOWN)
            attrs[key] = attrs.get(key, 0) + 1
            if storage is not None:
                attrs[semconv.CACHE_STORAGE_READ_BYTES] = attrs.get(semconv.CACHE_STORAGE_READ_BYTES, 0) + storage
            else:  # no honest figure for this file (a network filesystem): the sum is a lower bound, or none
                attrs.setdefault(semconv.CACHE_STORAGE_READ_UNKNOWN, "filesystem")

        detail, attributes = _detail(self.api)
        self.session.recorder.add(
            semconv.PHASE_DESERIALIZE, detail, attributes, self.bytes or size, self.start_ns, end, self.read_bytes if self.trusted else 0,
            self.major_faults if self.trusted else 0, on_add=count, charge_own_cost=not hook_times_itself)


def traced_fold(read: FoldedRead, wrapped, args, kwargs, began_ns: int):
    """load_file of a folded file: the host's call exactly once, its exception unchanged."""
    read.io_before()
    own_cost.of(read.session).add(semconv.PHASE_DESERIALIZE, time.perf_counter_ns() - began_ns)
    _files._local.depth += 1  # a file read of ours: load_file's inner safe_open handle stands aside
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _files._local.depth -= 1
        _end(read, exc, None)
        raise
    _files._local.depth -= 1
    _end(read, None, result)
    return result


def _end(read: FoldedRead, error, result) -> None:
    # recorder.add charges our work from the call's end on (own_cost.add_since).
    end_ns = time.time_ns()
    try:
        read.io_after()
        if isinstance(result, dict):
            read.bytes = _files._tensor_bytes(result)
        read.finish(error, end_ns=end_ns, hook_times_itself=False)  # the recorder charges from end_ns on
    except Exception:
        report_internal_error("folded file read")
