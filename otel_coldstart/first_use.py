"""After ready(): what the first requests read from storage, file by file.

Loaders now map checkpoint files instead of copying them (safetensors, transformers 5,
``torch.load(mmap=True)``): a model is "ready" while part of its weights has never been read,
and the first forward passes read those pages from storage. At ready() the storage ledger
names the files still mapped with pages out of the page cache (patches/_storage.py,
``coldstart.lazy.unread_bytes`` on their settlement records); this module follows them after
ready(), cheaply:

- **No per-tensor patch after ready().** What is read is seen in the page cache: one exact
  residency sample per file per tick (cachestat(2) per 8 MiB chunk of the file, asking only
  the chunks not yet found full: ~2 us a chunk plus ~4 ns a resident page; on kernels without
  cachestat, the sampled residency of probes.file_residency).
- **On the monitor thread** (inflight.py hands it over when the start-up ends: no thread is
  started for this where the monitor runs), every ``TICK_S``, stretched so that the
  follow-up's own CPU time stays under ``COST_SHARE`` of one core.
- **Durable**: a ``coldstart.first_use`` record under the file's span whenever the bytes
  read grew (at most every ``RECORD_GAP_S`` per file) and when the following ends, each
  followed by the same flush as the progress records: a process killed while followed leaves
  what was seen up to a second before. The latest record holds (readers merge it into the
  file's span, analyze/settlements.py). No record: nothing was read after ready() (yet).
- **Bounded**: until every page of the file is in the page cache or ``bound_s`` passed
  (``OTEL_COLDSTART_FIRST_USE_S``, default 300 s; 0 turns the follow-up off). An embedding
  table is read row by row as tokens are served, so a file may never become resident. An
  exit, SIGTERM or ``uninstrument()`` while following takes a last sample and ends the
  records with that reason (Startup.finish, before the exporters are drained).

The figure is the file's pages that came into the page cache since the follow-up's first
sample (moments after ready()), whoever read them: another process reading the same file is
counted too, and a page evicted and read again is counted once.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence

from . import probes, semconv
from ._errors import internal_errors
from ._regular_files import open_regular_fd
from .options import seconds_option

DEFAULT_BOUND_S = 300.0
ENV_BOUND_S = "OTEL_COLDSTART_FIRST_USE_S"
TICK_S = 0.25  # one sample per file per tick (the monitor's own change gap)
RECORD_GAP_S = 1.0  # a record when the figure grew, at most this often per file
COST_SHARE = 0.01  # the follow-up's own CPU time, as a share of one core, at most
CHUNK_PAGES = 2048  # 8 MiB of 4 KiB pages per cachestat call
MAX_CHUNKS = 4096  # larger files get larger chunks


class _Followed:
    """One file being followed: its chunks' resident pages (the most seen: a page evicted
    since is not unread again), its figure, and what its records said."""

    __slots__ = ("lazy", "pages", "chunks", "resident", "exact", "baseline", "missing", "first_ns", "last_ns",
                 "sample_ns", "recorded", "recorded_ns", "ended")

    def __init__(self, lazy) -> None:
        self.lazy = lazy
        self.pages = (lazy.size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        size = max(CHUNK_PAGES, -(-self.pages // MAX_CHUNKS))
        self.chunks = [(first, min(size, self.pages - first)) for first in range(0, self.pages, size)]
        self.resident = [0] * len(self.chunks)
        self.exact = True  # per-chunk cachestat; False: the sampled residency (no cachestat)
        self.baseline: float | None = None  # missing pages at the first sample
        self.missing: float | None = None  # the fewest missing pages seen since
        self.first_ns: int | None = None  # the sample that first saw pages come in
        self.last_ns: int | None = None  # the sample that last saw pages come in
        self.sample_ns: int | None = None
        self.recorded = 0  # the bytes the latest record said
        self.recorded_ns = 0
        self.ended: str | None = None

    def sample(self) -> bool:
        """Measure now; True when pages came in since the last sample."""
        missing = self._missing_now()
        now = time.time_ns()
        if missing is None:
            return False
        self.sample_ns = now
        if self.baseline is None:
            # The pages out at ready() (counted page by page then, patches/_storage.py), not
            # at this first sample: what came in between is first use too, and what is read
            # after ready() is never more than what was out then (issue 39).
            at_ready = -(-self.lazy.unread // mmap.PAGESIZE) if self.lazy.unread else None
            self.baseline = float(at_ready) if at_ready is not None and self.exact else missing
            self.missing = self.baseline
        if self.missing is None or missing < self.missing:
            self.missing = missing
            if self.first_ns is None:
                self.first_ns = now
            self.last_ns = now
            return True
        return False

    def _missing_now(self) -> float | None:
        if self.exact:
            try:
                fd = open_regular_fd(self.lazy.path)
            except OSError:
                return None
            try:
                open_chunks = [i for i, (_, count) in enumerate(self.chunks) if self.resident[i] < count]
                counts = probes.resident_pages_by_range(fd, [self.chunks[i] for i in open_chunks])
            finally:
                os.close(fd)
            if counts is not None:
                for i, count in zip(open_chunks, counts):
                    self.resident[i] = max(self.resident[i], count)
                return float(self.pages - sum(self.resident))
            self.exact = False
        found = probes.file_residency(self.lazy.path, self.lazy.size)
        return found.missing_pages if found is not None else None

    @property
    def read_bytes(self) -> int:
        if self.baseline is None or self.missing is None:
            return 0
        read = min(self.lazy.size, int(max(0.0, self.baseline - self.missing) * mmap.PAGESIZE))
        return min(read, self.lazy.unread) if self.lazy.unread else read

    @property
    def unread_bytes(self) -> int | None:
        return None if self.missing is None else min(self.lazy.size, int(self.missing * mmap.PAGESIZE))

    @property
    def resident_now(self) -> bool:
        return self.missing is not None and self.missing <= 0


class FollowUp:
    """The files one start-up left partly on storage at ready(), followed until each is
    resident or ``bound_s`` passed. :meth:`run` on the monitor thread; :meth:`end` from the
    thread that ends the process (exit, SIGTERM, ``uninstrument()``)."""

    def __init__(self, files: Sequence, ready_ns: int, bound_s: float,
                 flush: Callable[[], object] | None = None, on_read: Callable[[int], object] | None = None) -> None:
        self.ready_ns = ready_ns
        self.bound_s = bound_s
        self._files = [_Followed(f) for f in files]
        self._flush = flush
        self._on_read = on_read  # bytes read since the last call, with each pass that wrote records (metrics)
        self._reported = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.samples = 0  # passes over the files (for tests and the cost check)
        self.cpu_s = 0.0  # the follow-up's own CPU time
        self.done = threading.Event()  # every file's following has ended

    def run(self) -> None:
        """Follow the files until each is resident, the bound passes or :meth:`end`."""
        wait = 0.0
        while not self._stop.wait(wait):
            started = time.thread_time()
            with self._lock:
                if self.done.is_set():
                    return
                wrote = self._pass(None)
            if wrote and self._flush is not None:  # outside the lock: an ending never waits for it
                with internal_errors("first-use flush"):
                    self._flush()
            cost = time.thread_time() - started
            self.cpu_s += cost
            wait = max(TICK_S, cost / COST_SHARE)
            if self.done.is_set():
                return

    def end(self, reason: str) -> None:
        """The process is ending while following: a last sample, records ending with ``reason``
        (they go out with the exporters' drain that follows)."""
        self._stop.set()
        with self._lock:
            if not self.done.is_set():
                self._pass(reason)

    def _pass(self, ending: str | None) -> bool:
        """One sample of every file still followed, and the records due; True if any."""
        wrote = False
        now = time.time_ns()
        for followed in self._files:
            if followed.ended is not None:
                continue
            with internal_errors("first-use sample"):
                followed.sample()
                if followed.baseline is None:  # the file cannot be measured (gone, unreadable): no record
                    followed.ended = "unmeasurable"
                    continue
                if followed.resident_now:
                    followed.ended = semconv.FIRST_USE_END_RESIDENT
                elif ending is not None:
                    followed.ended = ending
                elif (now - self.ready_ns) / 1e9 >= self.bound_s:
                    followed.ended = semconv.FIRST_USE_END_BOUND
                grew = followed.read_bytes > followed.recorded
                if followed.ended is not None or (grew and now - followed.recorded_ns >= RECORD_GAP_S * 1e9):
                    self._record(followed, now)
                    wrote = True
        self.samples += 1
        if all(f.ended is not None for f in self._files):
            self.done.set()
        if wrote and self._on_read is not None:
            total = sum(f.read_bytes for f in self._files)
            if total > self._reported:
                with internal_errors("first-use metric"):
                    self._on_read(total - self._reported)
                self._reported = total
        return wrote

    def _record(self, followed: _Followed, now: int) -> None:
        def after_ready_s(ns: int | None) -> float:
            return round(max(0, ns - self.ready_ns) / 1e9, 3) if ns is not None else 0.0

        attrs: dict = {semconv.FIRST_USE_BYTES: followed.read_bytes,
                       semconv.FIRST_USE_FOLLOWED_S: after_ready_s(followed.sample_ns),
                       semconv.FIRST_USE_BOUND_S: self.bound_s}
        unread = followed.unread_bytes
        if unread is not None:
            attrs[semconv.FIRST_USE_UNREAD_BYTES] = unread
        if followed.first_ns is not None:
            attrs[semconv.FIRST_USE_FIRST_S] = after_ready_s(followed.first_ns)
            attrs[semconv.FIRST_USE_LAST_S] = after_ready_s(followed.last_ns)
        if followed.ended is not None:
            attrs[semconv.FIRST_USE_END] = followed.ended
        followed.lazy.record(semconv.SPAN_FIRST_USE, attrs)
        followed.recorded = followed.read_bytes
        followed.recorded_ns = now


def bound_from_env() -> float:
    """``OTEL_COLDSTART_FIRST_USE_S``: seconds to follow a file after ready() (0: not at all;
    a bad value is logged and the default used)."""
    return seconds_option(None, ENV_BOUND_S, DEFAULT_BOUND_S)


def start(files: Sequence, ready_ns: int, board=None, flush: Callable[[], object] | None = None,
          on_read: Callable[[int], object] | None = None) -> FollowUp | None:
    """Follow ``files`` (patches/_storage.LazyFile) from ready() on: on the monitor thread of
    ``board`` (inflight.ProgressBoard) when it runs, else on a daemon thread of its own (the
    in-flight monitor was turned off). None when there is nothing to follow or it is off."""
    bound_s = bound_from_env()
    if not files or bound_s <= 0:
        return None
    follow = FollowUp(files, ready_ns, bound_s, flush, on_read)
    continue_with = getattr(board, "continue_with", None)
    if continue_with is None or not continue_with(follow.run):
        threading.Thread(target=follow.run, name="otel-coldstart-first-use", daemon=True).start()
    return follow
