"""Exporter work on daemon threads, waited for at most a deadline.

An unreachable collector (or an exporter that ignores its own timeout) must never hold the
host's start-up or exit longer than ``export_timeout_s``.
"""

from __future__ import annotations

import threading
from typing import Callable


def in_background(fn: Callable[[], object], name: str = "otel-coldstart-export") -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except Exception:  # an exporter's failure is logged by the SDK; never ours to raise
            pass

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def run_bounded(fn: Callable[[], object], timeout_s: float, name: str = "otel-coldstart-export") -> None:
    """Run ``fn`` and wait at most ``timeout_s`` for it (0: do not wait at all)."""
    thread = in_background(fn, name)
    if timeout_s > 0:
        thread.join(timeout_s)
