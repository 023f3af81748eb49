"""Exporter work on daemon threads, waited for at most a deadline.

An unreachable collector (or an exporter that ignores its own timeout) must never hold the
host's start-up or exit longer than ``export_timeout_s``.

Never a thread started once the interpreter's exit has begun (:func:`exit_has_begun`, from
ending.py's ``atexit`` handler): Python 3.12 refuses it there ("can't create new thread at
interpreter shutdown", and ``os.fork`` likewise), and whatever version allows it, a thread
made in an ``atexit`` callback races the interpreter's own finalisation. The exit's work runs
on the exiting thread instead, each step bounded by the timeout its exporter is given, or is
handed to a thread of ours that exists already (own_tracing's span-export worker, the metric
readers' own threads): docs/decisions.md, "The exit starts no thread".
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_exiting = False


def exit_has_begun() -> None:
    """From here on, work asked for in the background runs on the calling thread."""
    global _exiting
    _exiting = True


def exiting() -> bool:
    return _exiting


class _Done:
    """Work that already ran on the calling thread: waiting for it returns at once."""

    name = "otel-coldstart-inline"

    def join(self, timeout: float | None = None) -> None:
        return None

    def is_alive(self) -> bool:
        return False


def in_background(fn: Callable[[], object], name: str = "otel-coldstart-export") -> threading.Thread | _Done:
    def run() -> None:
        try:
            fn()
        except Exception:  # an exporter's failure is logged by the SDK; never ours to raise
            pass

    if _exiting:
        run()
        return _Done()
    thread = threading.Thread(target=run, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:  # the interpreter refuses new threads (its exit began under us): run here
        run()
        return _Done()
    return thread


def run_bounded(fn: Callable[[], object], timeout_s: float, name: str = "otel-coldstart-export") -> None:
    """Run ``fn`` and wait at most ``timeout_s`` for it (0: do not wait at all). At the exit,
    on the calling thread: ``fn`` must then bound itself (the exporters' own timeouts); and
    work nobody would wait for (0: a collector that refuses connections) is not done there at
    all: it would hold the exit for the exporter's retries (issue 21.8)."""
    if _exiting and timeout_s <= 0:
        return
    thread = in_background(fn, name)
    if timeout_s > 0:
        thread.join(timeout_s)
