"""A download in flight, shared by the patches that fetch files over the network without
the hub's own bookkeeping (s3.py, fsspec.py): one ``coldstart.download.file`` span, the
bytes received so far (from the fetching threads, under a lock), the size announced, and an
end that happens once, whichever of completion, close, error or the start-up's end comes
first."""

from __future__ import annotations

import threading
import time

from .. import semconv
from .._errors import internal_errors, report_internal_error

# A followed file's read running on this thread (fsspec.py): a request the library makes
# inside it carries that file's bytes, so it is neither a second download (HfFileSystemFile
# opens the file again to stream it whole) nor a metadata request (huggingface_hub.py).
_reading = threading.local()


def inside_followed_read() -> bool:
    return getattr(_reading, "inside", False)


def enter_followed_read() -> bool:
    """Mark this thread as inside a followed read; returns the mark to restore."""
    outer = getattr(_reading, "inside", False)
    _reading.inside = True
    return outer


def leave_followed_read(outer: bool) -> None:
    _reading.inside = outer


class InFlight:
    """One file's span and the bytes it has received."""

    __slots__ = ("container", "received", "expected", "lock", "closed", "label")

    def __init__(self, container, label: str) -> None:
        self.container = container
        self.received = 0
        self.expected: int | None = None
        self.lock = threading.Lock()
        self.closed = False
        self.label = label  # the library, for internal-error reports

    def live_bytes(self) -> int:  # the progress board's view (inflight.py)
        return self.received

    def add(self, count: int) -> None:
        with self.lock:
            self.received += count

    def raise_to(self, count: int) -> None:
        """At least ``count`` received (a figure the library keeps itself, e.g. fsspec's block cache)."""
        with self.lock:
            self.received = max(self.received, count)

    def close(self, error: BaseException | None = None, path: str | None = None) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        with internal_errors(f"{self.label}: download end"):
            seconds = (time.time_ns() - self.container.start_ns) / 1e9
            attrs = {semconv.DOWNLOAD_BYTES: self.received, semconv.DOWNLOAD_CACHED_BYTES: 0,
                     semconv.DOWNLOAD_CACHE_HIT: False, semconv.DOWNLOAD_TRANSFER_S: seconds}
            if seconds > 0 and self.received:
                attrs[semconv.THROUGHPUT] = self.received / seconds
            if self.expected is not None:
                attrs[semconv.DOWNLOAD_EXPECTED_BYTES] = self.expected
            if path is not None:
                attrs[semconv.DOWNLOAD_PATH] = path
            self.container.finish(attrs, error=error, detach=False)

    def interrupt(self, end_ns: int) -> None:
        """The start-up ended (or was killed) with the file still in flight."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        attrs = {semconv.INTERRUPTED: True, semconv.DOWNLOAD_BYTES: self.received}
        if self.expected is not None:
            attrs[semconv.DOWNLOAD_EXPECTED_BYTES] = self.expected
        self.container.finish(attrs, end_ns=end_ns, detach=False)


def open_download(session, attrs: dict, label: str, start_ns: int | None = None, parent=None) -> InFlight | None:
    """Start the span of one file fetched on other threads or read whenever (never made the
    current span) and tell the progress board; None when that failed (reported)."""
    try:
        container = session.start_container(semconv.PHASE_DOWNLOAD, attrs, name=semconv.SPAN_DOWNLOAD_FILE,
                                            make_current=False, start_ns=start_ns, parent=parent)
        found = InFlight(container, label)
        container.on_interrupt = found.interrupt
        opened = getattr(session.progress, "download_opened", None)
        if opened is not None:
            opened(found)
        return found
    except Exception:
        report_internal_error(f"{label}: download start")
        return None
