"""Python 3.12+ warns on ``os.fork()`` in a multi-threaded process; our threads must not make
a single-threaded host see it.

CPython 3.12 added a ``DeprecationWarning`` ("This process (pid=N) is multi-threaded, use of
fork() may lead to deadlocks in the child.") issued by ``os.fork`` whenever the process has
more than one OS thread. An instrumented start-up has threads of ours (the SIGTERM watcher,
the in-flight monitor, the span-export worker): a host that forks with only its main thread
(a pre-fork server, ``multiprocessing`` with the fork start method) would get the warning
because of us, and under ``-W error`` its fork would raise. Our threads are fork-safe by
construction (ending.py: a forked child drops the parent's start-up and starts its own).

So before each fork, if the threads of the process other than ours are the main thread alone,
the warning would be ours: an ``ignore`` filter for that exact message (this pid) stands in
front of the host's filters for that fork. Any other thread (the host's, torch's OpenMP pool)
means the warning is the host's own, and it is left to show. The filter is re-decided before
every fork (3.12 warns between the at-fork hooks, 3.13 after them, so it cannot be removed in
``after_in_parent``); it matches this process's pid only. Threads that are not Python's and
not the host's (an OTLP/gRPC exporter's C-core threads) are counted as the host's: the
warning may then still show, never be hidden wrongly.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

OWN_THREAD_PREFIX = "otel-coldstart-"  # every thread the plugin starts is named so
_installed: list = []  # the filter entry in force, if any


def _os_thread_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: count Python's threads, as CPython does there
        return None


def _own_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(OWN_THREAD_PREFIX) and t.is_alive())


def _remove_filter() -> None:
    while _installed:
        entry = _installed.pop()
        try:
            warnings.filters.remove(entry)  # type: ignore[attr-defined]  # a list at runtime (typeshed: Sequence)
        except ValueError:  # the host reset the filters meanwhile
            pass
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()


def before_fork() -> None:
    """At-fork ``before`` hook: hide the warning only when our threads alone cause it."""
    try:
        _remove_filter()
        ours = _own_threads()
        if not ours:
            return
        total = _os_thread_count()
        if total is None:
            total = threading.active_count()
        if total - ours > 1:
            return  # the host is multi-threaded by itself: its warning
        message = rf"This process \(pid={os.getpid()}\) is multi-threaded, use of fork\(\)"
        warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        _installed.append(warnings.filters[0])
    except Exception:  # never into the host's fork
        pass


if sys.version_info >= (3, 12) and hasattr(os, "register_at_fork"):
    os.register_at_fork(before=before_fork)
