"""The plugin's own cost in a start-up, measured and reported apart from the host's work.

Three parts, each measured where it is spent:

- set-up: importing otel-coldstart and ``instrument()`` up to the import span's end
  (``coldstart.import.own_s`` on the import span, timed by controller.py);
- per-file and per-call work on the host's threads: the hooks time their own code (never the
  host's call inside them) with ``perf_counter_ns`` and add it here under the phase the work
  lands in (``deserialize`` for a checkpoint file's span, path and residency evidence); the
  rest of ``instrument()`` (patching what the host imported before it, under
  ``unattributed``, where it lands) and the patching done inside the host's later imports
  (``import``, patches/imports.py) are added the same way;
- the CPU time of the plugin's own threads (span export, the in-flight monitor), read from
  each thread's CPU clock when the start-up ends. They are Python threads: while one runs
  Python it holds the interpreter's lock, so its CPU time is time the host's Python threads
  could not run (on a machine with spare cores this over-counts what they cost the host).

At the end of the start-up the totals go on the root span (``coldstart.own_cost_s`` and its
parts, semconv.py); ``otel-coldstart analyze`` shows them beside the phases they landed in.
"""

from __future__ import annotations

import threading
import time

from . import semconv
from ._fork_warning import OWN_THREAD_PREFIX


class OwnCost:
    """Nanoseconds of the plugin's own work on the host's threads, by phase.

    ``add`` is called on the hot path from any thread without a lock: ``+=`` on a dict entry
    can lose an increment when two threads interleave there (the interpreter switches threads
    every 5 ms), which costs a figure a few microseconds at worst; a lock would cost every
    call instead."""

    __slots__ = ("by_phase_ns",)

    def __init__(self) -> None:
        self.by_phase_ns: dict[str, int] = {}

    def add(self, phase: str, nanoseconds: int) -> None:
        if nanoseconds > 0:
            by_phase = self.by_phase_ns
            by_phase[phase] = by_phase.get(phase, 0) + nanoseconds

    def add_since(self, phase: str, end_ns: int) -> None:
        """The bookkeeping from a host call's end (``time.time_ns()`` then) to now. An end
        further back than a second is not this call's (a caller's recorded end from elsewhere)."""
        elapsed = time.time_ns() - end_ns
        if 0 < elapsed < 1_000_000_000:
            self.add(phase, elapsed)


def of(session) -> OwnCost:
    """The start-up's accumulator, kept by its recorder (a new start-up starts at 0)."""
    return session.recorder.own_cost


def own_threads_cpu_ns() -> int:
    """CPU time so far of the plugin's threads still alive (named ``otel-coldstart-*``)."""
    total = 0
    clock_id = getattr(time, "pthread_getcpuclockid", None)
    if clock_id is None:  # not on this platform: the part is absent, not zero
        return -1
    for thread in threading.enumerate():
        if thread.name.startswith(OWN_THREAD_PREFIX) and thread.ident is not None and thread.is_alive():
            try:
                total += time.clock_gettime_ns(clock_id(thread.ident))
            except (OSError, ValueError, OverflowError):  # ended between the two calls
                continue
    return total


def note_on_root(session, setup_s: float | None) -> None:
    """The start-up's own cost on its root span's attributes (the last step of its end)."""
    session.root_attributes.update(attributes(of(session), setup_s, own_threads_cpu_ns()))


def attributes(cost: OwnCost, setup_s: float | None, threads_cpu_ns: int) -> dict:
    attrs: dict = {}
    total_ns = 0
    for phase, nanoseconds in sorted(cost.by_phase_ns.items()):
        attrs[f"{semconv.OWN_COST_PHASE_PREFIX}{phase}_s"] = nanoseconds / 1e9
        total_ns += nanoseconds
    if setup_s is not None and setup_s >= 0:
        attrs[semconv.OWN_COST_SETUP_S] = setup_s
        total_ns += int(setup_s * 1e9)
    if threads_cpu_ns >= 0:
        attrs[semconv.OWN_COST_THREADS_CPU_S] = threads_cpu_ns / 1e9
        total_ns += threads_cpu_ns
    attrs[semconv.OWN_COST_S] = total_ns / 1e9
    return attrs
