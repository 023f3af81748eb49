"""How many bytes of a checkpoint file came from storage during the start-up, whichever
thread read them and whenever.

The per-thread read counter (``coldstart.io.read_bytes``) only sees the thread it samples,
while it samples: ``safe_open`` reads the header when the handle is created (and the kernel
reads ahead several MiB with it), and the tensors of a mapped file are read when first
touched, by whoever touches them: torch's intra-op threads in a cast, a loader pool, a
``.to("cuda")`` long after the file's span ended. So the file's figure comes from the page
cache itself: the pages of the file that were not resident before its first read and are
resident when the figure is settled. Where the per-thread counters saw more (pages read and
dropped again under memory pressure), they are the figure.

A file's span always ends when its read ends, with the figure known then. When every page
of the file is resident at that moment (or was before the read), that figure is final.
Otherwise the span says ``coldstart.cache.storage_read_provisional`` and, when the start-up
ends, a ``coldstart.settlement`` record under the span carries the settled figure; readers
merge it into the span (analyze/settlements.py). Nothing is held open or written late, so a
process killed after the read still has the span, with the figure known at its end.

Lazy weights: when the start-up ends with ready(), a file still mapped by the process (its
tensors are backed by its pages) with pages out of the page cache has not been read yet: the
first forward passes will read those pages from storage. The final settlement says how many
bytes (``coldstart.lazy.unread_bytes``) and the file is handed to the first-use follow-up
(first_use.py), which watches its residency after ready(). A file nothing maps any more
(its tensors were copied or cast) is never read again and says nothing.

Everything here is per start-up (the ledger lives on the Startup) and per file (by identity):
the first span of a file carries its figure, later spans of the same file say so instead of
counting it twice.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from collections.abc import Callable

from .. import probes, semconv
from .._errors import internal_errors
from .._regular_files import open_regular_fd
from ..verdicts import is_lazily_unread

# Why a file span has no coldstart.cache.storage_read_bytes (coldstart.cache.storage_read_unknown).
UNKNOWN_NOT_A_FILE = "not_a_file"  # read from bytes or a stream: no file whose cache we can ask
UNKNOWN_FILESYSTEM = "filesystem"  # "filesystem:<type>": network/FUSE, residency and block I/O say nothing
UNKNOWN_NO_RESIDENCY = "no_residency"  # no cachestat/mincore answer (a file we may not write) and the
#                                        reads were made where the thread counters do not see them (mmap)
UNKNOWN_COUNTED_ON_FIRST_SPAN = "counted_on_first_span"  # a later read of a file already counted

# Evidence tokens (coldstart.cache.evidence) for the storage figure.
EVIDENCE_RESIDENCY_DELTA = "residency_delta"  # residency before the first read -> when settled
# The same, but the "before" was measured after the handle was created (it was created where
# no wrapper of ours saw it): the header read at creation, with its readahead, is not in it.
EVIDENCE_RESIDENCY_DELTA_AFTER_OPEN = "residency_delta_after_open"
EVIDENCE_READ_BYTES = "read_bytes"  # the per-thread counters of the file's own reads

_WHOLE = 0.999  # "every page is in": the figure at the span's end is final
# A file at least this resident before its first read is settled when its span ends, with
# no second measurement: at most 1% of it can have come from storage since (and what the
# loader's own calls read, the thread counters see). A warm file with a few pages missing
# (common on a busy machine) would otherwise pay a second residency measurement.
_SETTLE_AT_ONCE_FROM = SETTLE_AT_ONCE_FROM = 0.99


class StoredFile:
    """One file's storage facts in this start-up: its residency before its first read."""

    __slots__ = ("path", "size", "fs_type", "before", "before_open", "claimed", "identity")

    def __init__(self, path: str, size: int | None, fs_type: str | None, before, before_open: bool,
                 identity: tuple[int, int] | None = None) -> None:
        self.path = path
        self.identity = identity  # (st_dev, st_ino)
        self.size = size
        self.fs_type = fs_type
        self.before = before  # probes.Residency, or None where the kernel cannot say
        self.before_open = before_open  # measured before the loader opened the file
        self.claimed = False  # a span carries this file's figure already

    @property
    def fs_trusted(self) -> bool:
        return probes.filesystem_trusted(self.fs_type)

    @property
    def before_ratio(self) -> float | None:
        return self.before.ratio if self.before is not None else None


def storage_figure(stored: StoredFile | None, after, thread_read_bytes: int | None,
                   counters_see_every_read: bool) -> tuple[int | None, list[str], str | None]:
    """(bytes read from storage, evidence tokens, reason when there is no figure).

    ``after``: the file's residency when settled, on the same pages as ``stored.before``.
    ``thread_read_bytes``: the per-thread counters of the file's own span (None where the
    filesystem does not count them). ``counters_see_every_read``: the loader read every byte
    inside its call (load_file, torch.load without mmap); false where pages are read on first
    touch, later and by other threads (safe_open handles, torch.load(mmap=True))."""
    if stored is None:
        return None, [], UNKNOWN_NOT_A_FILE
    if not stored.fs_trusted:
        return None, [], f"{UNKNOWN_FILESYSTEM}:{stored.fs_type or 'unknown'}"
    size = stored.size or 0
    if stored.before is not None and after is not None:
        became_resident = max(0.0, stored.before.missing_pages - after.missing_pages)
        figure = min(size, int(became_resident * mmap.PAGESIZE))
        evidence = [EVIDENCE_RESIDENCY_DELTA if stored.before_open else EVIDENCE_RESIDENCY_DELTA_AFTER_OPEN]
        if thread_read_bytes is not None:
            evidence.append(EVIDENCE_READ_BYTES)
            figure = max(figure, min(size, thread_read_bytes))
        return figure, evidence, None
    if thread_read_bytes is not None and counters_see_every_read:
        return min(size, thread_read_bytes) if size else thread_read_bytes, [EVIDENCE_READ_BYTES], None
    return None, [], UNKNOWN_NO_RESIDENCY


def figure_attributes(figure: int | None, evidence: list[str], reason: str | None, after) -> dict:
    attrs: dict = {}
    if figure is not None:
        attrs[semconv.CACHE_STORAGE_READ_BYTES] = figure
    if reason is not None:
        attrs[semconv.CACHE_STORAGE_READ_UNKNOWN] = reason
    if after is not None:
        attrs[semconv.CACHE_SETTLED_RESIDENT_RATIO] = round(after.ratio, 4)
    return attrs


class StorageLedger:
    """The files of one start-up, and the file spans waiting for their figure."""

    def __init__(self, session) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._files: dict[tuple[int, int], StoredFile] = {}  # (st_dev, st_ino) -> facts
        self._waiting: list[Callable[[bool], None]] = []
        self._closed = False
        self._settling = threading.Lock()  # an interim pass and the final one never overlap
        # Set by the final pass at ready(): the files still mapped with pages out of the page
        # cache (what the first requests will read from storage), for the first-use follow-up.
        self.lazily_unread: list[LazyFile] = []
        self._mapped: tuple[set, set] | None = None  # /proc/self/maps, read once by that pass

    def observe(self, path: str, *, before_open: bool = True, facts: os.stat_result | None = None) -> StoredFile | None:
        """The file's facts, measured once per start-up, at the first sight of it: before the
        loader opens it where a wrapper of ours sees the open (``before_open``). ``facts``:
        ``os.stat(path)`` where the caller has just taken it."""
        if facts is None:
            try:
                facts = os.stat(path)
            except (OSError, ValueError, TypeError):
                return None  # the host's own call will raise its error for this
        if not stat.S_ISREG(facts.st_mode):
            return None  # a FIFO, socket or device: never opened by us (an open could block)
        # The file itself, whatever name it was reached by (HF caches link snapshots to
        # blobs): one stat, where realpath would stat every component of the path.
        key = (facts.st_dev, facts.st_ino)
        with self._lock:
            stored = self._files.get(key)
        if stored is not None:
            return stored
        fs_type = probes.filesystem_type(path)
        # Measured on every filesystem: the cache verdict uses it wherever the kernel answers;
        # the storage figure only where the filesystem's reads go through the page cache.
        before = probes.file_residency(path, facts.st_size)
        stored = StoredFile(path, facts.st_size, fs_type, before, before_open, key)
        with self._lock:
            return self._files.setdefault(key, stored)

    def claim(self, stored: StoredFile | None) -> bool:
        """True for the first span of the file: it carries the file's figure."""
        if stored is None:
            return True
        with self._lock:
            first, stored.claimed = not stored.claimed, True
        return first

    def settle_later(self, settle: Callable[[bool], None]) -> bool:
        """Queue ``settle`` (it writes a settlement record) for the end of the start-up; False
        if that has passed (the figure at the span's end is then final)."""
        with self._lock:
            # Until settle_all has run, at ready(): a handle the end of the start-up closes (a
            # safe_open kept without a with-block) is settled with the others, so a file it
            # still maps is said and followed after ready() (issue 39). Any other end: the
            # figure at the span's end is final, as for work cut short.
            session = self._session
            if self._closed or (session.ended and session.end_reason != semconv.END_READY):
                return False
            self._waiting.append(settle)
            return True

    def settle_all(self) -> None:
        """At the end of the start-up: write every waiting file's settlement record (at
        ready(), with the bytes still out of the page cache of each file still mapped)."""
        with self._settling:
            with self._lock:
                self._closed = True
                waiting, self._waiting = self._waiting, []
            for settle in waiting:
                with internal_errors("storage figure"):
                    settle(True)
            self._mapped = None

    def unread_at_ready(self, stored: StoredFile, now) -> int | None:
        """Bytes of ``stored`` out of the page cache at ready() (``now``: its residency) that
        later touches will read from storage: only while the process still maps the file (its
        tensors are backed by its pages; a file whose tensors were copied and whose mapping is
        gone is never read again) and when worth saying (verdicts.is_lazily_unread)."""
        if self._session.end_reason != semconv.END_READY or now is None or now.ratio >= _WHOLE:
            return None
        unread = min(stored.size or 0, int(now.missing_pages * mmap.PAGESIZE))
        if not is_lazily_unread(unread, stored.size):
            return None
        if self._mapped is None:  # once per ready(), and only where some file is partly out
            self._mapped = probes.mapped_files() or (set(), set())  # unreadable: say nothing
        identities, paths = self._mapped
        if stored.identity in identities or os.path.realpath(stored.path) in paths:
            return unread
        return None

    def settle_interim(self) -> None:
        """While the start-up runs (the in-flight monitor, before each progress record): an
        interim settlement record, still provisional, for each waiting file whose figure grew
        since, so that a process killed later shows the figure known shortly before."""
        with self._settling:
            with self._lock:
                waiting = list(self._waiting)
            for settle in waiting:
                with internal_errors("storage figure"):
                    settle(False)


class LazyFile:
    """A file still mapped at ready() with ``unread`` bytes out of the page cache: what the
    first-use follow-up watches (first_use.py); ``record(name, attributes)`` writes a record
    under the file's span."""

    __slots__ = ("path", "size", "identity", "unread", "record")

    def __init__(self, stored: StoredFile, unread: int, record: Callable[[str, dict], None]) -> None:
        self.path = stored.path
        self.size = stored.size or 0
        self.identity = stored.identity
        self.unread = unread
        self.record = record


def ledger_for(session) -> StorageLedger:
    """The start-up's storage ledger (``Startup.storage``: settled when it ends, after the
    patches' own end hooks closed their handles)."""
    return session.startup.storage


def observe_file(session, path: str | None, *, before_open: bool = True) -> StoredFile | None:
    """Measure the file's residency now if this start-up has not seen it yet (call it before
    the loader touches the file)."""
    if session is None or path is None:
        return None
    return ledger_for(session).observe(path, before_open=before_open)


def start_file_span(session, path: str, *, before_open: bool,
                    facts: os.stat_result | None = None) -> tuple[StoredFile | None, bool, float | None]:
    """For a file span starting now: (the file's facts, whether this span carries the file's
    storage figure, the residency its cache verdict rests on). The first span of a file uses
    the residency from before the file's first read; a later span (the file read again) is
    judged on the residency now, and leaves the storage figure to the first."""
    ledger = ledger_for(session)
    stored = ledger.observe(path, before_open=before_open, facts=facts)
    first = ledger.claim(stored)
    if stored is None:
        return None, first, None
    if first:
        return stored, True, stored.before_ratio
    now = probes.file_residency(stored.path, stored.size, stored.before.ranges) if stored.before else None
    return stored, False, now.ratio if now is not None else None


def finish_with_figure(session, stored: StoredFile | None, thread_read_bytes: int | None,
                       counters_see_every_read: bool, end_span: Callable[[dict, list], None],
                       settled_later: Callable[[dict, list], None],
                       record_under_span: Callable[[str, dict], None] | None = None) -> None:
    """End a file's span now, at its own end time, with its storage figure:
    ``end_span(attributes, evidence)``. Final when every page of the file is in the page cache
    (nothing more can come from storage) or the start-up has ended; otherwise the figure known
    now, marked provisional, and ``settled_later(attributes, evidence)`` is called with the
    settled figure when the start-up ends (it writes the settlement record). At ready(), a file
    still mapped with pages out of the page cache gets ``coldstart.lazy.unread_bytes`` on that
    record and is followed after ready() (first_use.py), whose records
    ``record_under_span(name, attributes)`` writes under the file's span."""
    def figure_now(after, at_span_end=None) -> tuple[dict, list]:
        figure, evidence, reason = storage_figure(stored, after, thread_read_bytes, counters_see_every_read)
        attrs = figure_attributes(figure, evidence, reason, after)
        if stored is not None and figure is not None and at_span_end is not None and after is not None:
            attrs[semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES] = read_after_span(stored, at_span_end, after)
        return attrs, evidence

    if stored is None or not stored.fs_trusted or stored.before is None:
        end_span(*figure_now(_residency_now(stored)))
        return
    before = stored.before
    if before.ratio >= _SETTLE_AT_ONCE_FROM:
        end_span(*figure_now(before))  # (almost) every page was in before the first read: final
        return
    at_span_end = _residency_now(stored)
    attrs, evidence = figure_now(at_span_end)
    if at_span_end is None or at_span_end.ratio >= _WHOLE:
        end_span(attrs, evidence)
        return

    last_figure = [attrs.get(semconv.CACHE_STORAGE_READ_BYTES)]
    ledger = ledger_for(session)

    def settle(final: bool) -> None:
        now = _residency_now(stored)
        settled_attrs, settled_evidence = figure_now(now, at_span_end)
        if final and record_under_span is not None:
            if now is not None and now.ratio < _WHOLE:
                # Partly out at the end: what is out is followed after ready() page by page
                # (first_use.py), so it is counted page by page here too, not estimated from
                # the sample the figure read on (issue 39).
                now = _exact_residency(stored) or now
            unread = ledger.unread_at_ready(stored, now)
            if unread is not None:
                settled_attrs[semconv.LAZY_UNREAD_BYTES] = unread
                _within_the_file(settled_attrs, stored.size or 0, unread)
                ledger.lazily_unread.append(LazyFile(stored, unread, record_under_span))
        if not final:  # an interim record, only when the figure grew
            figure = settled_attrs.get(semconv.CACHE_STORAGE_READ_BYTES)
            if figure is None or (last_figure[0] is not None and figure <= last_figure[0]):
                return
            last_figure[0] = figure
            settled_attrs[semconv.CACHE_STORAGE_READ_PROVISIONAL] = True
        settled_later(settled_attrs, settled_evidence)

    if ledger.settle_later(settle):
        attrs[semconv.CACHE_STORAGE_READ_PROVISIONAL] = True
        end_span(attrs, evidence)
    else:  # the start-up has ended (a read after ready()): nothing settles later
        end_span(*figure_now(at_span_end, at_span_end))


def _within_the_file(attrs: dict, size: int, unread: int) -> None:
    """Bytes read from storage before ready() and bytes still out then are one file: their sum
    is at most its size (the thread counters, which the figure takes where they saw more,
    count a page read twice, or another file's readahead, twice over)."""
    room = max(0, size - unread)
    for key in (semconv.CACHE_STORAGE_READ_BYTES, semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES):
        value = attrs.get(key)
        if isinstance(value, int) and value > room:
            attrs[key] = room


def _exact_residency(stored: StoredFile):
    """Every page of the file counted (one cachestat(2) over the whole file: ~4 ns a resident
    page), or None where the kernel cannot say."""
    size = stored.size or 0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    if pages <= 0:
        return None
    try:
        fd = open_regular_fd(stored.path)
    except OSError:
        return None
    try:
        counts = probes.resident_pages_by_range(fd, ((0, pages),))
    finally:
        os.close(fd)
    if not counts:
        return None
    return probes.Residency(min(pages, counts[0]), pages, pages, ((0, pages),))


def read_after_span(stored: StoredFile, at_span_end, settled) -> int:
    """Bytes of the file that came from storage after its span ended (pages of a mapped file
    first touched by later casts, copies, other threads): residency at the span's end
    against residency when settled, on the same pages."""
    came_in = max(0.0, at_span_end.missing_pages - settled.missing_pages)
    return min(stored.size or 0, int(came_in * mmap.PAGESIZE))


def _residency_now(stored: StoredFile | None):
    if stored is None or stored.before is None or not stored.fs_trusted:
        return None
    return probes.file_residency(stored.path, stored.size, stored.before.ranges)
