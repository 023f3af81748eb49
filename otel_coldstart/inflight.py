"""A start-up in flight: durable progress records, live progress gauges, a stall watchdog.

The start-ups that most need debugging are the ones that never finish: killed by the
kubelet when its startup probe gives up, by the OOM killer, or stuck in a download or a
collective. A SIGKILL runs no handler, so whatever is to survive it must already be
written. This module keeps it written, at a cost the host cannot see:

- **A board** (:class:`ProgressBoard`) that the session feeds at span boundaries only: a
  span opened, a span ended (per phase and per shard, never per tensor; a count under a
  lock each). What is open it reads from the session's open-work registry, the one list of
  it; the bytes a ``safe_open`` handle has read are the counter its file read already
  keeps, which its span holds.
- **One daemon thread per start-up** (``otel-coldstart-inflight``) that looks at the board
  four times a second (a dict read; nothing on the host's threads) and, from it:

  * writes a **progress record**: a zero-length ``coldstart.progress`` span under the
    still-open root, with the root's start and attributes, the open spans (id, parent,
    name, phase, start, file), the running phase, bytes loaded and expected. The first is
    written at once (the start-up is on disk from ``instrument()`` on); then one follows
    each change (a span of ours opened or ended) at most every ``CHANGE_GAP_S`` (0.25 s,
    stretching to 5% of the elapsed time), and one every ``progress_interval_s`` (default
    5 s, stretching to 2%) while nothing changes, as a last sign of life. Our own provider
    is flushed right after each record (waited for in the embedded file mode; over OTLP
    it leaves on a thread of ours), so every finished span and the latest record are on
    disk within about a second. ``otel-coldstart analyze`` rebuilds a killed start-up from
    the last record (analyze/interrupted.py);
  * runs the **stall watchdog**: when nothing progressed (no span opened or ended, no
    checkpoint bytes loaded, no bytes read from storage by the process) for
    ``stall_after_s`` (default 120 s), it records the Python stacks of all threads once per
    stall, as a ``coldstart.stall`` event on the open span (and on the next progress
    record, so a start-up killed while stalled keeps it), and logs one line.
- **Observable gauges** (``model.startup.inflight.*``), read at collection time from the
  board: nothing is computed unless something scrapes. They report nothing once the
  start-up has ended.
- **Time to ready** (time_to_ready.py): at its first wake-up after the first record, the
  thread reads earlier start-ups of the service once (bounded); from then on each record
  and the ``remaining`` gauge carry the estimate of the seconds left (or, in the record, why
  there is none).

``stop()`` (at ``ready()``, exit, SIGTERM or ``uninstrument()``) only sets an event: the
thread notices within one tick and ends; nothing waits for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections import namedtuple
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import ending, semconv
from ._errors import internal_errors, logger, report_internal_error
from .options import DEFAULT_PROGRESS_INTERVAL_S, DEFAULT_STALL_AFTER_S
from .verdicts import running_work

if TYPE_CHECKING:  # pragma: no cover
    from .time_to_ready import LiveEstimate

# Bounds: a record and a stall event stay a few KiB whatever the host does.
MAX_OPEN_LISTED = 32  # open spans in one record (the latest started; the rest are counted)
MAX_STALLS = 16  # stall events per start-up
STACKS_MAX_CHARS = 8192  # all threads' stacks in one stall event
FRAMES_PER_THREAD = 12
MIN_TICK_S = 0.05
STRETCH = 50  # the record interval is at least elapsed / STRETCH
# After a change (a span of ours opened or ended), a record follows within this, stretching
# to elapsed / CHANGE_STRETCH: a process killed half a second in still names where it was,
# and a busy four-minute start-up writes about a hundred records (~200 KiB), not thousands.
CHANGE_GAP_S = 0.25
CHANGE_STRETCH = 20
UNATTRIBUTED = semconv.UNATTRIBUTED  # the running phase when no span of ours is open

_FILE_ATTRIBUTES = (semconv.FILE_PATH, semconv.FILE_SIZE, semconv.FILE_FORMAT, semconv.SHARD_INDEX,
                    semconv.SHARD_COUNT,
                    # a download's: which file it was fetching, should the start-up be killed
                    semconv.DOWNLOAD_SOURCE, semconv.DOWNLOAD_REPO, semconv.DOWNLOAD_FILENAME, semconv.DOWNLOAD_HOST)


class _Open:
    """A span open now, or a top-level import in progress (patches/imports.py), as the board
    sees it: made from the session's open-work registry at each look. An import has no span
    until it ends, so its id here is made from its thread and start (stable across records,
    never the id its span gets); it is named by its module: "import torch", not "unattributed"."""

    __slots__ = ("container", "span_id", "parent_id", "name", "phase", "start_ns", "thread_id", "attributes",
                 "file_read", "download")

    def __init__(self, work, container=None) -> None:
        self.container = container
        self.name, self.phase, self.start_ns, self.thread_id = work.name, work.phase, work.start_ns, work.thread_id
        self.parent_id = None
        self.file_read = self.download = None
        if container is None:
            self.span_id = (hash((work.thread_id, work.start_ns)) & 0x7FFFFFFFFFFFFFFF) | 1
            self.attributes = {semconv.IMPORT_MODULE: work.label}
            return
        self.span_id = work.span_id
        parent = container.parent
        if parent is not None and parent.is_valid:
            self.parent_id = parent.span_id
        attrs = container.attributes
        self.attributes = {k: attrs[k] for k in _FILE_ATTRIBUTES if k in attrs}
        self.file_read = container.file_read  # a patches._files.FileRead whose .bytes grow as it reads
        self.download = container.download  # in flight (patches/huggingface_hub.py, s3.py): .live_bytes()


def _open_entries(session) -> list:
    """The open spans and the imports in progress, oldest first, from the session's open-work
    registry (one lock, a short list); graph captures have no span to list yet."""
    open_entries = getattr(session, "open_entries", None)  # a board may watch a stand-in with no registry
    if open_entries is None:
        return []
    return [_Open(work, key if work.span_id is not None else None) for key, work in open_entries()
            if work.span_id is not None  # a live span, registered under its ContainerSpan
            or work.phase == semconv.PHASE_IMPORT and isinstance(work.label, str)]


class Snapshot(namedtuple("Snapshot", (
    "now_ns",
    "elapsed_s",
    "phase",  # the running phase (UNATTRIBUTED when no span of ours is open)
    "phase_elapsed_s",  # time in the running span (or since the last span ended)
    "running",  # the _Open running now, or None
    "open",  # of _Open, oldest first
    "bytes_loaded",
    "bytes_expected",
    "opened",
    "done",
    "expected_source",  # semconv.EXPECTED_FROM_*: what bytes_expected is made of
    "last_done",  # (name, attributes, end_ns) of the span of ours that ended last
), defaults=(None, None))):
    """What a start-up in flight looks like at ``now_ns`` (a namedtuple, as the start-up path's
    other records: a dataclass and its module are ~1.5 ms on instrument()'s path)."""

    __slots__ = ()


class ProgressBoard:
    """What one start-up has done so far. Hooks run on the host's threads at span
    boundaries; everything else runs on the monitor thread or at metric collection."""

    def __init__(self, session, *, progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
                 stall_after_s: float = DEFAULT_STALL_AFTER_S, flush: Callable[[], Any] | None = None) -> None:
        self.session = session
        self.progress_interval_s = progress_interval_s
        self.stall_after_s = stall_after_s
        self._flush = flush
        self._lock = threading.Lock()
        self._opened = 0
        self._done = 0
        self._last_end_ns = session.start_ns
        self._loaded: dict[str, int] = {}  # file path -> bytes read by its finished reads
        self._sizes: dict[str, int] = {}  # file path -> size, every checkpoint file seen
        self._index_totals: dict[str, int | None] = {}  # directory -> what its index expects
        self._downloaded = 0  # network bytes of the downloads that ended
        self._download_expected: int | None = None  # the sizes they announced
        # Time to ready: where earlier start-ups are (plain values, from start_for), read once on
        # this thread into an estimate (time_to_ready.LiveEstimate) at its first wake-up.
        self.history_sources: dict | None = None
        self.time_to_ready: LiveEstimate | None = None
        self._last_done: tuple | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopped = False
        self.prepare = None  # run once at the first tick (see start_for)
        self._then: Callable[[], Any] | None = None  # run on this thread once stopped (continue_with)
        self._then_taken = False
        # Monitor-thread state.
        self._seq = 0
        self._fingerprint: tuple | None = None
        self._last_progress_ns = time.time_ns()
        self._stalled = False
        self.stalls = 0
        self._next_record_ns = 0
        self._last_record_ns = 0
        self._recorded_changes = -1  # the opened+done count the latest record saw
        self._recorded_aggregate_calls = 0  # the unwritten aggregates' calls the latest record saw
        self._ticked_aggregate_calls = 0  # ... and the previous tick

    # --- hooks (host threads: one dict operation each, never raise) ------------------------

    def span_opened(self, container) -> None:
        with internal_errors("inflight span opened"):
            attributes = container.attributes
            with self._lock:
                self._opened += 1
                if attributes.get(semconv.PHASE) == semconv.PHASE_DESERIALIZE:
                    self._note_size(attributes)

    def span_done(self, name: str, attributes) -> None:
        if name in _NOT_WORK:
            return
        with internal_errors("inflight span done"):
            end = time.time_ns()
            with self._lock:
                self._done += 1
                self._last_end_ns = end
                self._last_done = (name, attributes, end)
                if name == semconv.SPAN_DOWNLOAD_FILE:
                    self._note_download(attributes)
                if attributes.get(semconv.PHASE) == semconv.PHASE_DESERIALIZE:
                    self._note_size(attributes)
                    path, nbytes = attributes.get(semconv.FILE_PATH), attributes.get(semconv.BYTES)
                    if isinstance(path, str) and isinstance(nbytes, int) and nbytes > 0:
                        self._loaded[path] = max(self._loaded.get(path, 0), nbytes)

    @staticmethod
    def file_read_opened(read) -> None:
        """A checkpoint file read began: its ``bytes`` counter shows progress inside the file
        (held by its span, which the board finds in the session's open-work registry)."""
        read.container.file_read = read

    @staticmethod
    def download_opened(download) -> None:
        """A file download began: its network bytes so far go on each progress record (a
        start-up killed mid-download keeps the partial file's bytes and which file it was)."""
        download.container.download = download

    def download_totals(self, entries) -> tuple[int, int | None]:
        """(network bytes of the start-up's downloads so far, bytes they announced), the
        finished ones and those in flight; None expected when no file announced a size."""
        with self._lock:
            received, expected = self._downloaded, self._download_expected
        for entry in entries:
            if entry.download is not None:
                received += entry.download.live_bytes()
                size = getattr(entry.download, "expected", None)
                if isinstance(size, int):
                    expected = (expected or 0) + size
        return received, expected

    def _note_download(self, attributes) -> None:
        if attributes.get(semconv.DOWNLOAD_CACHE_HIT) is True:
            return  # nothing of it came over the network, nor was expected to
        nbytes, size = attributes.get(semconv.DOWNLOAD_BYTES), attributes.get(semconv.DOWNLOAD_EXPECTED_BYTES)
        if isinstance(nbytes, int):
            self._downloaded += nbytes
        size = size if isinstance(size, int) else nbytes
        if isinstance(size, int):
            self._download_expected = (self._download_expected or 0) + size

    def _note_size(self, attributes) -> None:
        path, size = attributes.get(semconv.FILE_PATH), attributes.get(semconv.FILE_SIZE)
        if isinstance(path, str) and isinstance(size, int) and size > 0:
            self._sizes[path] = size

    # --- reading it --------------------------------------------------------------------------

    def snapshot(self, now_ns: int | None = None) -> Snapshot:
        now = time.time_ns() if now_ns is None else now_ns
        entries = _open_entries(self.session)  # the session's lock, not nested in ours
        with self._lock:
            opened, done, last_end, last_done = self._opened, self._done, self._last_end_ns, self._last_done
            loaded = dict(self._loaded)
            sizes = dict(self._sizes)
        for entry in entries:
            path = entry.attributes.get(semconv.FILE_PATH)
            live = getattr(entry.file_read, "bytes", 0) if entry.file_read is not None else 0
            if isinstance(path, str) and isinstance(live, int) and live > loaded.get(path, 0):
                loaded[path] = live
        running = running_work(entries, threading.main_thread().ident)
        if running is not None:
            phase, since = running.phase or UNATTRIBUTED, running.start_ns
        else:
            phase, since = UNATTRIBUTED, last_end
        start = self.session.start_ns
        expected, source = self._expected(sizes)
        return Snapshot(now, max(0, now - start) / 1e9, phase, max(0, now - since) / 1e9, running, tuple(entries),
                        sum(loaded.values()), expected, opened, done, source, last_done)

    def _expected(self, sizes: dict[str, int]) -> tuple[int | None, str | None]:
        """(bytes expected, what they are made of): for each directory of a file seen, what
        its checkpoint index expects (``total_size``, else the sizes of the files it names);
        where a directory has no index, the sizes of the files opened so far there. Index
        files are read once, on the monitor thread (or at a scrape), never on the host's."""
        if not sizes:
            return None, None
        by_directory: dict[str, list[int]] = {}
        for path, size in sizes.items():
            by_directory.setdefault(os.path.dirname(path), []).append(size)
        total = 0
        sources = set()
        for directory, file_sizes in by_directory.items():
            if directory not in self._index_totals:
                self._index_totals[directory] = index_expected_bytes(directory)
            indexed = self._index_totals[directory]
            if indexed is not None:
                total += indexed
                sources.add(semconv.EXPECTED_FROM_INDEX)
            else:
                total += sum(file_sizes)
                sources.add(semconv.EXPECTED_FROM_FILES_OPENED)
        return total, "+".join(sorted(sources, key=(semconv.EXPECTED_FROM_INDEX, semconv.EXPECTED_FROM_FILES_OPENED).index))

    # --- the monitor thread ------------------------------------------------------------------

    @property
    def tick_s(self) -> float:
        ticks = [t for t in (self.progress_interval_s, self.stall_after_s / 4) if t > 0]
        if self.progress_interval_s > 0:
            ticks.append(CHANGE_GAP_S)  # records follow changes within CHANGE_GAP_S
        return max(MIN_TICK_S, min(ticks)) if ticks else 0.0

    def start(self) -> None:
        if self.tick_s <= 0 or self._thread is not None:
            return
        now = time.time_ns()
        self._last_progress_ns = now
        self._next_record_ns = now + int(self.progress_interval_s * 1e9)
        self._thread = threading.Thread(target=self._run, name="otel-coldstart-inflight", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The start-up ended: no more records, gauges report nothing. Never waits."""
        self.stopped = True
        self._stop.set()

    def continue_with(self, work: Callable[[], Any]) -> bool:
        """Run ``work()`` on the monitor thread once the start-up has ended, instead of ending
        the thread (the first-use follow-up, first_use.py). False where no monitor thread is
        there to take it (turned off, or gone already)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._then_taken:
                return False
            self._then = work
            return True

    def _run(self) -> None:
        tick = self.tick_s
        if self.progress_interval_s > 0:
            with internal_errors("inflight monitor"):  # the first record at once: the start-up is on disk from instrument() on
                self.tick(first=True)
        while not self._stop.wait(tick):
            # Both import modules that evaluate generated source (ending.SOURCE_EVALS): never
            # while the process is exiting on a KeyboardInterrupt.
            prepare, self.prepare = self.prepare, None
            if prepare is not None:
                with internal_errors("inflight prepare"):
                    ending.SOURCE_EVALS.run(prepare)
            if self.history_sources is not None:
                self._read_history()
            with internal_errors("inflight monitor"):
                self.tick()
        with self._lock:
            then, self._then, self._then_taken = self._then, None, True
        if then is not None:
            with internal_errors("inflight follow-up"):
                then()

    def _read_history(self) -> None:
        """Earlier start-ups of this service, read once (bounded; time_to_ready.py)."""
        sources, self.history_sources = self.history_sources, None
        if sources is None:
            return
        with internal_errors("inflight history"):
            if not ending.SOURCE_EVALS.run(_import_time_to_ready):
                return
            from . import time_to_ready  # imported by now: a lookup, no source evaluated

            self.time_to_ready = time_to_ready.LiveEstimate.load(time_to_ready.sources_for(**sources))

    def estimate(self, snap: Snapshot):
        """The time-to-ready estimate for ``snap`` (its ``remaining_s``, and ``overrun_s``: how
        far past the earlier start-ups it is where matched), None without one (no history,
        not read yet)."""
        live = self.time_to_ready
        return live.estimate(snap) if live is not None else None

    def tick(self, now_ns: int | None = None, first: bool = False) -> None:
        """One wake-up: notice progress or a stall, and write a record when one is due: the
        first, one after a change (at most every CHANGE_GAP_S, stretched), one every
        progress_interval_s (stretched) as a sign of life, one with each stall."""
        if self.stopped:
            return
        snap = self.snapshot(now_ns)
        now = snap.now_ns
        # A download's bytes are progress too: a long transfer is no stall. So are calls summed into
        # aggregates (small checkpoint files folded into one, patches/_folded_files.py: no span each).
        fingerprint = (snap.opened, snap.done, snap.bytes_loaded, process_read_bytes(),
                       self.download_totals(snap.open)[0], self._aggregate_calls())
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            self._last_progress_ns = now
            self._stalled = False
        stall = None
        idle_ns = now - self._last_progress_ns
        if (self.stall_after_s > 0 and not self._stalled and self.stalls < MAX_STALLS
                and idle_ns >= self.stall_after_s * 1e9):
            self._stalled = True
            self.stalls += 1
            stall = self._record_stall(snap, idle_ns)
        if self.progress_interval_s <= 0:
            return
        elapsed_ns = max(0, now - self.session.start_ns)
        changes = snap.opened + snap.done
        gap_passed = now >= self._last_record_ns + max(int(CHANGE_GAP_S * 1e9), elapsed_ns // CHANGE_STRETCH)
        changed = changes != self._recorded_changes and gap_passed
        # Aggregates (casts, copies) are written only when their parent ends: their figures
        # go on the records instead, so a SIGKILL keeps them (issue 39). A record follows
        # when the calls stopped (no call since the last tick: the figures are final, on disk
        # within two ticks of the last call), and while they go on, at the change cadence.
        aggregate_calls = self._aggregate_calls()
        aggregates_changed = aggregate_calls != self._recorded_aggregate_calls and (
            aggregate_calls == self._ticked_aggregate_calls or gap_passed)
        self._ticked_aggregate_calls = aggregate_calls
        if first or changed or aggregates_changed or now >= self._next_record_ns or stall is not None:
            self._write_record(snap, idle_ns, stall)
            self._recorded_changes = changes
            self._recorded_aggregate_calls = aggregate_calls
            self._last_record_ns = now
            self._next_record_ns = now + max(int(self.progress_interval_s * 1e9), elapsed_ns // STRETCH)

    def _aggregate_calls(self) -> int:
        recorder = getattr(self.session, "recorder", None)
        if recorder is None:
            return 0
        with internal_errors("inflight aggregates"):
            return recorder.interim_calls()
        return 0

    def _record_stall(self, snap: Snapshot, idle_ns: int) -> dict:
        running = snap.running
        main = threading.main_thread().ident
        thread_id = running.thread_id if running is not None and isinstance(running.thread_id, int) else main
        stacks = format_stacks(sys._current_frames(), first=thread_id, skip={threading.get_ident()})
        attrs: dict[str, Any] = {
            semconv.STALL_IDLE_S: round(idle_ns / 1e9, 3),
            semconv.STALL_PHASE: snap.phase,
            semconv.STALL_STACKS: stacks,
        }
        if isinstance(thread_id, int):
            attrs[semconv.STALL_THREAD_ID] = thread_id
        target = running.container.span if running is not None and running.container is not None \
            else self.session.root
        if running is not None:
            attrs[semconv.STALL_SPAN_ID] = format(running.span_id, "016x")
        if target.is_recording():
            target.add_event(semconv.EVENT_STALL, attrs, timestamp=snap.now_ns)
        where = stacks.split("\n", 2)[1].strip() if "\n" in stacks else "?"
        logger.warning("otel-coldstart: start-up stalled: no progress for %.1f s in phase %s (%s); waiting in %s",
                       idle_ns / 1e9, snap.phase, running.name if running else "no open span", where)
        return attrs

    def _write_record(self, snap: Snapshot, idle_ns: int, stall: dict | None) -> None:
        import json  # on the monitor thread, at the first record (never the host's)

        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan

        session = self.session
        self._seq += 1
        parent_id = getattr(session, "_root_parent_id", None)
        root = {
            "start_ns": session.start_ns,
            "parent_id": format(parent_id, "016x") if parent_id else None,
            # dict() copies in one step: the end of the start-up may update it meanwhile.
            "attributes": {k: v for k, v in dict(session.root_attributes).items()
                           if isinstance(v, (str, bool, int, float))},
        }
        listed = snap.open[-MAX_OPEN_LISTED:]
        open_spans = []
        for entry in listed:
            item = {"span_id": format(entry.span_id, "016x"),
                    "parent_id": format(entry.parent_id, "016x") if entry.parent_id else None,
                    "name": entry.name, "phase": entry.phase, "start_ns": entry.start_ns,
                    "thread_id": entry.thread_id, "attributes": dict(entry.attributes)}
            live = getattr(entry.file_read, "bytes", 0) if entry.file_read is not None else 0
            if isinstance(live, int) and live > 0:
                item["attributes"][semconv.BYTES] = live
            if entry.download is not None:  # the partial file's bytes, should this be the last record
                with internal_errors("inflight download bytes"):
                    item["attributes"][semconv.DOWNLOAD_BYTES] = entry.download.live_bytes()
                    size = getattr(entry.download, "expected", None)
                    if isinstance(size, int):
                        item["attributes"][semconv.DOWNLOAD_EXPECTED_BYTES] = size
            open_spans.append(item)
        attrs: dict[str, Any] = {
            semconv.PROGRESS_SEQ: self._seq,
            semconv.PROGRESS_ROOT: json.dumps(root, separators=(",", ":")),
            semconv.PROGRESS_OPEN: json.dumps(open_spans, separators=(",", ":")),
            semconv.PROGRESS_PHASE: snap.phase,
            semconv.PROGRESS_BYTES_LOADED: snap.bytes_loaded,
            semconv.PROGRESS_IDLE_S: round(idle_ns / 1e9, 3),
        }
        recorder = getattr(session, "recorder", None)
        if recorder is not None:
            with internal_errors("inflight aggregates"):
                aggregates = recorder.interim_records()
                if aggregates:
                    attrs[semconv.PROGRESS_AGGREGATES] = json.dumps(aggregates, separators=(",", ":"))
        with internal_errors("inflight download totals"):
            downloaded, download_expected = self.download_totals(listed)
            if downloaded or download_expected:
                attrs[semconv.PROGRESS_DOWNLOAD_BYTES] = downloaded
                if download_expected is not None:
                    attrs[semconv.PROGRESS_DOWNLOAD_EXPECTED] = download_expected
        if snap.bytes_expected is not None:
            attrs[semconv.PROGRESS_BYTES_EXPECTED] = snap.bytes_expected
            attrs[semconv.PROGRESS_BYTES_EXPECTED_SOURCE] = snap.expected_source
        if self.time_to_ready is not None:
            with internal_errors("inflight estimate"):
                attrs.update(self.time_to_ready.record_attributes(snap))
        context = trace.set_span_in_context(NonRecordingSpan(session.root_context))
        span = session.tracer.start_span(semconv.SPAN_PROGRESS, context=context, start_time=snap.now_ns,
                                         attributes=attrs)
        if stall is not None:
            span.add_event(semconv.EVENT_STALL, stall, timestamp=snap.now_ns)
        span.end(end_time=snap.now_ns)
        startup = getattr(session, "startup", None)
        if startup is not None:  # storage figures still waiting: the figure known now, on disk too
            startup.storage.settle_interim()
        if self._flush is not None:
            self._flush()


_NOT_WORK = frozenset({semconv.SPAN_ROOT, semconv.SPAN_SETTLEMENT, semconv.SPAN_FIRST_USE})  # spans that end no work


def index_expected_bytes(directory: str) -> int | None:
    """What the Hugging Face ``*.index.json`` files in ``directory`` say the checkpoint holds:
    each index's ``metadata.total_size`` (the bytes of every tensor), or, for an index
    without it, the sizes of the files its ``weight_map`` names; None without an index."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".index.json"))
    except OSError:
        return None
    import json  # on the monitor thread (or at a scrape), never the host's

    total = None
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                document = json.load(handle)
            size = (document.get("metadata") or {}).get("total_size")
            if not (isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0):
                files = {str(f) for f in (document.get("weight_map") or {}).values()}
                size = sum(os.path.getsize(os.path.join(directory, f)) for f in files) if files else None
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        if size:
            total = (total or 0) + int(size)
    return total



def process_read_bytes() -> int | None:
    """Bytes this process caused to be read from storage (``/proc/self/io``): page faults
    on a mapped checkpoint count, reads served by the page cache do not."""
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


_MORE_THREADS_ROOM = 32  # len("... 999999 more thread(s)") with a margin


def format_stacks(frames: dict, first: int | None = None, skip: set | frozenset = frozenset(),
                  max_chars: int = STACKS_MAX_CHARS, frames_per_thread: int = FRAMES_PER_THREAD) -> str:
    """Every thread's Python stack, innermost frame first, ``first`` listed first::

        thread MainThread (139872):
          slow_download (/srv/app.py:12)
          main (/srv/app.py:30)

    No source lines are read (no file I/O at stall time); bounded to ``max_chars``."""
    names = {t.ident: t.name for t in threading.enumerate()}
    order = sorted((i for i in frames if i not in skip), key=lambda i: (i != first, i != threading.main_thread().ident))
    blocks = []
    used = 0
    for index, ident in enumerate(order):
        lines = [f"thread {names.get(ident, '?')} ({ident}):"]
        frame, depth = frames[ident], 0
        while frame is not None and depth < frames_per_thread:
            code = frame.f_code
            lines.append(f"  {code.co_name} ({code.co_filename}:{frame.f_lineno})")
            frame, depth = frame.f_back, depth + 1
        if frame is not None:
            lines.append("  ...")
        block = "\n".join(lines)
        # Leave room for the "... N more thread(s)" line unless this is the last thread: the
        # final cut to max_chars must never eat it (long paths made it vanish).
        room = max_chars if index == len(order) - 1 else max_chars - _MORE_THREADS_ROOM
        if used + len(block) + 1 > room:
            blocks.append(f"... {len(order) - index} more thread(s)")
            break
        blocks.append(block)
        used += len(block) + 1
    return "\n".join(blocks)[:max_chars]


# --- gauges ------------------------------------------------------------------------------

class _GaugeSource:
    """The board the gauges of one meter provider read (the current start-up's)."""

    def __init__(self) -> None:
        self.board: ProgressBoard | None = None
        self.labels: dict = {}
        self._cached: tuple[float, Snapshot] | None = None

    def snapshot(self) -> Snapshot | None:
        board = self.board
        if board is None or board.stopped:
            return None
        now = time.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < 0.2:  # one scrape asks four times
            return cached[1]
        snap = board.snapshot()
        self._cached = (now, snap)
        return snap


# meter provider -> its source: the instruments are made once per provider (a second
# instrument() on the same provider re-points them). Weak keys: a provider that is gone
# takes its entry with it (an id() key could be reused by a new provider).
_gauge_sources: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_gauge_lock = threading.Lock()


def register_gauges(meter_provider, board: ProgressBoard, labels: dict) -> None:
    """The in-flight gauges on ``meter_provider``, reading ``board`` from now on."""
    from opentelemetry.metrics import CallbackOptions, Observation

    from .metrics import phase_label

    with _gauge_lock:
        source: _GaugeSource | None = None
        try:
            source = _gauge_sources.get(meter_provider)
        except TypeError:  # a provider that cannot be weakly referenced: make its instruments each time
            pass
        fresh = source is None
        if source is None:
            source = _GaugeSource()
            try:
                _gauge_sources[meter_provider] = source
            except TypeError:
                pass
        source.board, source.labels, source._cached = board, dict(labels), None
    if not fresh:
        return

    def observe(value_of):
        def callback(_options: CallbackOptions):
            try:
                snap = source.snapshot()
                if snap is None:
                    return []
                value = value_of(snap)
                if value is None:
                    return []
                return [Observation(value, {**source.labels, semconv.PHASE: phase_label(snap.phase)})]
            except Exception:
                report_internal_error("inflight gauge")
                return []
        return callback

    def estimated(field: str):  # a figure of the time-to-ready estimate (absent without one)
        return lambda snap: getattr(source.board and source.board.estimate(snap), field, None)

    from .package import __version__

    meter = meter_provider.get_meter("otel_coldstart", __version__)
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_ELAPSED, [observe(lambda s: s.elapsed_s)], unit="s",
        description="Start-ups in flight: seconds since the process started, by the phase running now")
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_PHASE_ELAPSED, [observe(lambda s: s.phase_elapsed_s)], unit="s",
        description="Start-ups in flight: seconds in the phase running now")
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_LOADED, [observe(lambda s: s.bytes_loaded)], unit="By",
        description="Start-ups in flight: checkpoint bytes read so far")
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_EXPECTED, [observe(lambda s: s.bytes_expected)], unit="By",
        description="Start-ups in flight: checkpoint bytes expected (the index's total_size, else the files seen)")
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_REMAINING, [observe(estimated("remaining_s"))], unit="s",
        description="Start-ups in flight: estimated seconds left to ready(), from earlier start-ups of the "
                    "service (absent without any)")
    meter.create_observable_gauge(
        semconv.METRIC_INFLIGHT_OVERRUN, [observe(estimated("overrun_s"))], unit="s",
        description="Start-ups in flight: seconds past the earlier start-ups of the service where this one is "
                    "(a step longer than before; 0 when not past, absent without any)")


def _import_time_to_ready() -> None:
    """The history's modules define NamedTuples: their import evaluates generated source
    (run through ending.SOURCE_EVALS)."""
    from . import time_to_ready  # noqa: F401


def start_for(session, *, progress_interval_s: float, stall_after_s: float, flush=None, meter_provider=None,
              labels: dict | None = None, prepare=None, history: dict | None = None) -> ProgressBoard:
    """Attach a board to ``session``, register the gauges where metrics go, start the thread
    (Startup._end stops it). ``prepare`` runs once on the monitor thread at its first
    tick (a start-up still running then gets its metrics made, off the host's thread).
    ``history``: where earlier start-ups are (time_to_ready.sources_for's arguments), read
    on the monitor thread for the time-to-ready estimate."""
    board = ProgressBoard(session, progress_interval_s=progress_interval_s, stall_after_s=stall_after_s,
                          flush=flush)
    board.prepare = prepare
    board.history_sources = history
    session.progress = board
    if meter_provider is not None:
        with internal_errors("inflight gauges"):
            register_gauges(meter_provider, board, labels or {})
    board.start()
    return board
