"""How a start-up ends, decided before anything is done: :func:`plan` is a pure function of
the end reason and what the start-up has (tests/core/test_startup_plan.py);
``Startup.finish`` (startup.py) carries the :class:`Plan` out."""

from __future__ import annotations

from collections import namedtuple

from . import semconv

# End reasons after which nothing of ours runs any more (the interpreter exits, or the
# SIGTERM watcher kills the process): everything is done now, within one deadline.
EXITING = frozenset({semconv.END_EXIT, semconv.END_EXCEPTION, semconv.END_SIGTERM})


# Records of the start-up path are collections.namedtuple, not typing.NamedTuple: the typed
# form costs ~0.1 ms more per class, on instrument()'s path (issue 24's fixed cost).
class Plan(namedtuple("Plan", (
    "reason",
    "end",
    "ready",
    "make_metrics",
    "record_metrics",
    "summary",
    "later",
    "wait_for_file",
    "drain",
    "fallback",
    "deadline_s",
    "give_back_sigterm",
))):
    """What ending a start-up for ``reason`` does, decided before anything is done.

    ``end``: the start-up is still open and ends now (False: it ended before, e.g. the exit
    after ``ready()``, which only drains). ``ready``: the root's ``coldstart.ready``.
    ``make_metrics``: the metrics only we push are made now (nothing of ours runs later).
    ``record_metrics`` / ``summary``: recorded / printed on the calling thread now.
    ``later``: what a thread of ours does after ``ready()`` ("summary", "metrics").
    ``wait_for_file``: the local trace file is written before this returns (the summary
    names it; callers read ``trace_file()`` right after ``ready()``).
    ``drain``: flush and shut down our exporters and metrics, all within ``deadline_s``
    (exit, SIGTERM, ``uninstrument()``); ``fallback`` (an exit, spans meant for somewhere
    else than the local file): a trace whose delivery was not confirmed by then is written
    to the local file instead, and one stderr line says so. ``give_back_sigterm``: the host
    lives on (``ready()``, ``uninstrument()``): its SIGTERM disposition is its own again.
    """

    __slots__ = ()


def plan(reason: str, *, ended: bool, summary: bool, metrics: bool, metrics_later: bool, file_mode: bool,
         remote: bool, deadline_s: float) -> Plan:
    """The plan for ending with ``reason`` (a pure function: tests/core/test_startup_plan.py).

    ``metrics``: a metrics set-up exists now; ``metrics_later``: metrics only we push, not
    made yet; ``file_mode``: spans go to the local file; ``remote``: they go somewhere else
    that may not answer (OTLP, a provider the host configured)."""
    exiting = reason in EXITING
    give_back = reason in (semconv.END_READY, semconv.END_UNINSTRUMENTED)
    drain = exiting or reason == semconv.END_UNINSTRUMENTED
    # The fallback file is for an exit: after uninstrument() the host lives on with its provider.
    fallback = exiting and remote
    if ended:  # ended before (the exit after ready()): only the drain is left
        return Plan(reason, False, False, False, False, False, (), False, drain, fallback, deadline_s, give_back)
    ready = reason == semconv.END_READY
    if drain:
        # Nothing of ours runs after this: metrics made and recorded, summary printed, now.
        record = metrics or metrics_later
        return Plan(reason, True, ready, metrics_later, record, summary, (), file_mode, True, fallback, deadline_s,
                    give_back)
    # ready(): what a reader may collect right after it (a provider the host passed, a
    # Prometheus endpoint) is recorded here; the summary and the metrics only we push go to
    # a thread of ours (the analysis imports alone are ~8 ms), unless the breakdown is
    # computed here anyway.
    record = metrics and not metrics_later
    summary_now = summary and record
    later = tuple(name for name, wanted in (("summary", summary and not summary_now), ("metrics", metrics_later))
                  if wanted)
    return Plan(reason, True, ready, False, record, summary_now, later, file_mode, False, False, deadline_s, give_back)
