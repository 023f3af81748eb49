"""One start-up: everything it owns, and the one place where it ends.

A :class:`Startup` is made by ``instrument()`` (controller.py) and dropped by
``uninstrument()`` or a fork. It owns:

- the **session** (session.py: the root span, the span plumbing the patches use, the
  open-work registry, the aggregates, each patch module's state, per-thread values such as
  the ambient parents of ``safe_open`` handles);
- the **options**, the **export set-up** (export.py) and the **metrics** set-up;
- the **storage ledger** (patches/_storage.py: each file's residency before its first read,
  and the storage figures still to settle);
- the **progress board** and its monitor thread (inflight.py);
- the per-start-up device facts the per-call patches keep (``device_windows``, ``cuda_up``,
  ``runtime_failure_recorded``);
- the **after-ready job** (the summary and the metrics only we push, on a thread of ours).

It ends in one method, :meth:`Startup.finish`, for every reason: ``ready()``, exit,
uncaught exception (Ctrl-C included), SIGTERM and ``uninstrument()``. ``finish`` first
computes a :class:`Plan` (a pure function of the reason and what the start-up has: what to
record and print now, what a thread of ours does later, whether the exporters are drained
and shut down within one deadline) and then carries it out. Anything that is per process
(the patch sets of originals, caches of file facts, the SIGTERM watcher, the import hooks)
stays in module globals and the controller.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import namedtuple
from typing import Any

from . import _otel_env, export, own_tracing, patches, semconv
from . import session as _session
from ._bounded import in_background
from ._errors import internal_errors, report_internal_error
from .inflight import (DEFAULT_PROGRESS_INTERVAL_S, DEFAULT_STALL_AFTER_S, ENV_PROGRESS_INTERVAL_S,
                       ENV_STALL_AFTER_S, seconds_option)
from .patches._storage import StorageLedger

# End reasons after which nothing of ours runs any more (the interpreter exits, or the
# SIGTERM watcher kills the process): everything is done now, within one deadline.
_EXITING = frozenset({semconv.END_EXIT, semconv.END_EXCEPTION, semconv.END_SIGTERM})


class Options:
    """``instrument()``'s options, checked (see :func:`otel_coldstart.instrument`)."""

    __slots__ = ("start_at", "output_dir", "summary", "export_timeout_s", "handle_sigterm", "metric_attributes",
                 "prometheus_port", "progress_interval_s", "stall_after_s", "history_dir")

    def __init__(self, start_at: str = "process", output_dir: str | None = None, summary: bool | None = None,
                 export_timeout_s: float = 5.0, handle_sigterm: bool = True,
                 metric_attributes: dict | None = None, prometheus_port: int | None = None,
                 progress_interval_s: float | None = None, stall_after_s: float | None = None,
                 history_dir=None) -> None:
        if start_at not in ("process", "instrument"):
            raise ValueError("start_at must be 'process' or 'instrument'")
        self.start_at = start_at
        self.output_dir = output_dir
        self.summary = summary
        self.export_timeout_s = float(export_timeout_s)
        self.handle_sigterm = handle_sigterm
        self.metric_attributes = dict(metric_attributes or {})
        self.prometheus_port = prometheus_port
        self.progress_interval_s = seconds_option(progress_interval_s, ENV_PROGRESS_INTERVAL_S,
                                                  DEFAULT_PROGRESS_INTERVAL_S)
        self.stall_after_s = seconds_option(stall_after_s, ENV_STALL_AFTER_S, DEFAULT_STALL_AFTER_S)
        self.history_dir = history_directories(history_dir)


ENV_HISTORY_DIR = "OTEL_COLDSTART_HISTORY_DIR"


def history_directories(value) -> tuple[str, ...] | None:
    """Where the time-to-ready estimate looks for earlier start-ups: the directories passed
    (a path, several joined by os.pathsep, or a list), else ``OTEL_COLDSTART_HISTORY_DIR``;
    ``()`` for the default (the directory of this process's own trace files); None: off
    (``False``, or the variable set to ``off``). Nothing is read here."""
    if value is None:
        text = os.environ.get(ENV_HISTORY_DIR, "").strip()
        if text.lower() == "off":
            return None
        return tuple(p for p in text.split(os.pathsep) if p)
    if value is False:
        return None
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, (str, os.PathLike)) for p in value):
        paths = tuple(p for item in value for p in os.fspath(item).split(os.pathsep) if p)
        if paths:
            return paths
    raise ValueError(f"history_dir must be a directory (or several joined by {os.pathsep!r}, or a list of them), "
                     f"or False to turn the time-to-ready estimate off; got {value!r}")


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
    to the local file instead, and one stderr line says so.
    """

    __slots__ = ()


def plan(reason: str, *, ended: bool, summary: bool, metrics: bool, metrics_later: bool, file_mode: bool,
         remote: bool, deadline_s: float) -> Plan:
    """The plan for ending with ``reason`` (a pure function: tests/core/test_startup_plan.py).

    ``metrics``: a metrics set-up exists now; ``metrics_later``: metrics only we push, not
    made yet; ``file_mode``: spans go to the local file; ``remote``: they go somewhere else
    that may not answer (OTLP, a provider the host configured)."""
    exiting = reason in _EXITING
    drain = exiting or reason == semconv.END_UNINSTRUMENTED
    # The fallback file is for an exit: after uninstrument() the host lives on with its provider.
    fallback = exiting and remote
    if ended:  # ended before (the exit after ready()): only the drain is left
        return Plan(reason, False, False, False, False, False, (), False, drain, fallback, deadline_s)
    ready = reason == semconv.END_READY
    if drain:
        # Nothing of ours runs after this: metrics made and recorded, summary printed, now.
        record = metrics or metrics_later
        return Plan(reason, True, ready, metrics_later, record, summary, (), file_mode, True, fallback, deadline_s)
    # ready(): what a reader may collect right after it (a provider the host passed, a
    # Prometheus endpoint) is recorded here; the summary and the metrics only we push go to
    # a thread of ours (the analysis imports alone are ~8 ms), unless the breakdown is
    # computed here anyway.
    record = metrics and not metrics_later
    summary_now = summary and record
    later = tuple(name for name, wanted in (("summary", summary and not summary_now), ("metrics", metrics_later))
                  if wanted)
    return Plan(reason, True, ready, False, record, summary_now, later, file_mode, False, False, deadline_s)


class Startup:
    """Everything one start-up owns (see the module's docstring); ended by :meth:`finish`."""

    def __init__(self, session: "_session.StartupSession", setup: export.ExportSetup, options: Options,
                 summary: bool, metrics=None, metrics_later: bool = False) -> None:
        self.session = session
        session.startup = self
        self.setup = setup
        self.options = options
        self.summary = summary
        self.metrics = metrics  # a metrics.MetricsSetup, or None
        # Metrics only we push (OTLP, console), made by a thread of ours when first needed.
        self.metrics_later = metrics_later
        self.storage = StorageLedger(session)
        self.progress = None  # inflight.ProgressBoard, once started
        # Device facts of the per-call patches (tensor_ops, runtime), per start-up.
        # (device index, stream id) -> its _device_windows.StreamWindow: the timed work queued
        # there, shared by every thread that uses the stream, and its pool of spare events.
        self.device_windows: dict = {}
        self.cuda_up = False  # CUDA is initialised: a copy to CUDA no longer initialises it first
        self.runtime_failure_recorded = False  # a failed CUDA initialisation has its span
        self.after_ready_job: threading.Thread | None = None
        self.first_use = None  # first_use.FollowUp: files still partly on storage at ready(), followed
        self._first_use_metrics = None  # (StartupMetrics, labels) its counter is added to
        self.plans: list[Plan] = []  # what finish() decided, in order (for tests and debugging)
        self.lock = threading.Lock()
        self._finish_lock = threading.RLock()
        self.fallback_path: str | None = None  # where undelivered spans were written, if anywhere

        # What the end of the start-up settles, in this order, before the root span ends:
        # the rank (the process group is usually made after instrument()), each patch's open
        # work (handles, captures), then the storage figures of files read lazily.
        session.on_end(lambda: session.root_attributes.update(rank_attributes()))
        session.on_end(lambda: _end_patches(session))
        session.on_end(self.storage.settle_all)
        # Before the monitor thread is stopped (registered later, by start_inflight): it is
        # handed the first-use follow-up instead of ending.
        session.on_end(self._follow_first_use)
        session.on_end(self._note_dropped_spans)

    def _follow_first_use(self) -> None:
        """At ready(): follow the files the storage ledger found still mapped with pages out
        of the page cache (first_use.py); nothing when every file was resident."""
        files = self.storage.lazily_unread
        if files and self.session.end_reason == semconv.END_READY:
            from . import first_use

            self.first_use = first_use.start(files, self.session.end_ns or time.time_ns(), self.progress,
                                             self._own_flush(), self._count_first_use)

    def _count_first_use(self, nbytes: int) -> None:
        """On the monitor thread: bytes the first requests read, onto their counter (metrics
        only we push are made now if the after-ready job has not made them yet)."""
        metrics_setup = self.make_metrics_later() if self.metrics_later else self.metrics
        if metrics_setup is None:
            return
        from .metrics import StartupMetrics, identifying_attributes

        if self._first_use_metrics is None:
            labels = identifying_attributes(self.session.resource, self.options.metric_attributes)
            self._first_use_metrics = (StartupMetrics(metrics_setup.provider), labels)
        instruments, labels = self._first_use_metrics
        instruments.add_first_use(nbytes, labels)

    def _own_flush(self):
        """Our own provider's flush after a record (waited for in the file mode, a local
        append; over OTLP it leaves on a thread of ours); None for a provider the host made."""
        setup, timeout = self.setup, self.options.export_timeout_s
        if not setup.owned:
            return None
        wait = setup.file_path is not None
        return lambda: export.flush(setup, timeout, wait=wait)

    def _note_dropped_spans(self) -> None:
        """Spans our provider could not queue (a bound was hit): said on the root."""
        dropped = getattr(self.setup.provider, "dropped_spans", 0)
        if isinstance(dropped, int) and dropped > 0:
            self.session.root_attributes[semconv.EXPORT_DROPPED_SPANS] = dropped

    # --- while it runs ---------------------------------------------------------------------

    def start_inflight(self, metrics_setup) -> None:
        """Progress records, in-flight gauges and the stall watchdog (inflight.py). The first
        record is written at once, on the monitor thread: the start-up is on disk (or sent)
        from instrument() on, so that even a process killed in its first second leaves a
        file ``analyze`` reads as one killed start-up. Each record is followed by a flush of
        our own provider: waited for in the file mode (a local append), not over OTLP. A
        provider the host configured keeps its own schedule."""
        from . import inflight

        options = self.options
        flush = self._own_flush()
        labels = None
        if metrics_setup is not None:
            from .metrics import identifying_attributes

            labels = identifying_attributes(self.session.resource, options.metric_attributes)
        with internal_errors("inflight start"):
            self.progress = inflight.start_for(
                self.session, progress_interval_s=options.progress_interval_s, stall_after_s=options.stall_after_s,
                flush=flush, meter_provider=metrics_setup.provider if metrics_setup is not None else None,
                labels=labels, prepare=(lambda: self.make_metrics_later()) if self.metrics_later else None,
                history=self._history_sources())

    def _history_sources(self) -> dict | None:
        """Where the time-to-ready estimate finds earlier start-ups of this service (plain
        values: the monitor thread reads them, time_to_ready.sources_for): the directories
        asked for, else the one this process writes its own trace file to."""
        directories = self.options.history_dir
        if directories is None:
            return None
        own = self.setup.file_path
        if not directories:
            directory = (os.path.dirname(own) if own else self.options.output_dir
                         or os.environ.get("OTEL_COLDSTART_OUTPUT_DIR") or export.DEFAULT_OUTPUT_DIR)
            directories = (directory,)
        session = self.session
        return {"directories": tuple(os.path.abspath(d) for d in directories), "resource": dict(session.resource),
                "own_file": own, "trace_id": format(session.root_context.trace_id, "032x"),
                "start_ns": session.start_ns}

    def make_metrics_later(self):
        """Make the metrics only we push, once, on whichever of our threads needs them first
        (the in-flight monitor registers its gauges on them while the start-up runs)."""
        with self.lock:
            if self.metrics is None and self.metrics_later:
                with own_tracing.SDK_IMPORTS:
                    self.metrics = configure_metrics(None, None)
                session = self.session
                if self.metrics is not None and self.progress is not None and not session.ended:
                    with internal_errors("inflight gauges"):
                        from .inflight import register_gauges
                        from .metrics import identifying_attributes

                        labels = identifying_attributes(session.resource, self.options.metric_attributes)
                        register_gauges(self.metrics.provider, self.progress, labels)
            return self.metrics

    def make_exporters_before_exit(self) -> None:
        """At the exit, before thread pools shut down: the exporters made later (span
        exporters at the first flush, metrics after ready()) are made now if they were not
        yet, so that the exit's export (atexit, afterwards) has them."""
        sink = getattr(self.setup.provider, "sink", None)
        if isinstance(sink, own_tracing.SdkExporters):
            sink.exporters()
        if self.metrics_later:
            self.make_metrics_later()

    # --- the end ---------------------------------------------------------------------------

    def plan(self, reason: str) -> Plan:
        setup = self.setup
        return plan(reason, ended=self.session.ended, summary=bool(self.summary), metrics=self.metrics is not None,
                    metrics_later=self.metrics_later and self.metrics is None,
                    file_mode=setup.file_path is not None,
                    remote=setup.exports and setup.file_path is None,
                    deadline_s=self.options.export_timeout_s)

    def finish(self, reason: str, exception_type: str | None = None) -> Plan:
        """End the start-up for ``reason`` (semconv.END_*) and do what follows from it: the
        one place a start-up ends. Never call it from a signal handler (it takes the
        recorder's, the session's and the SDK's locks: see ending.py)."""
        started = time.monotonic()  # the deadline counts from here (SIGTERM's budget started at the signal)
        with self._finish_lock:
            decided = self.plan(reason)
            self.plans.append(decided)
            if decided.end:
                self._end(decided, exception_type)
            if decided.drain:
                if self.first_use is not None:  # ending while following: a last sample, said why
                    with internal_errors("first-use end"):
                        self.first_use.end(reason)
                first_token = sys.modules.get("otel_coldstart.first_token")  # loaded by a first request only
                if first_token is not None:  # ending during the first request: it ends marked interrupted
                    with internal_errors("first-request end"):
                        first_token.end_running(self.session, reason)
                self._drain(decided, started)
            return decided

    def _end(self, decided: Plan, exception_type: str | None) -> None:
        if not self.session.end(ready=decided.ready, reason=decided.reason, exception_type=exception_type):
            return
        for module in patches.loaded():
            if module.HOT_PATH:  # steady-state serving must pay nothing
                with internal_errors(f"unpatch {module.__name__}"):
                    module.unpatch()
        if self.metrics is None and not self.metrics_later:  # a meter provider may have been set since
            self.metrics = configure_metrics(None, self.options.prometheus_port)
        if decided.make_metrics:
            self.make_metrics_later()
        record = decided.record_metrics and self.metrics is not None
        breakdown = self.breakdown() if (decided.summary or record) else None
        if record:
            self.record_metrics(breakdown)
        timeout = self.options.export_timeout_s
        if not decided.drain:
            if record:
                with internal_errors("metrics flush"):
                    from .metrics import flush as flush_metrics

                    flush_metrics(self.metrics, timeout, wait=False)  # push now, in the background
            with internal_errors("flush"):
                # A local file is quick to write, and the summary names it: wait for it. A
                # remote collector never holds ready().
                export.flush(self.setup, timeout, wait=decided.wait_for_file)
                self.setup.start_up_over()  # what ends after ready() (captures, loads) goes out by itself
        elif decided.summary and decided.wait_for_file:
            # The summary says whether the file was written: write it first (a local file is
            # quick; the drain's own flush then finds nothing left).
            with internal_errors("flush"):
                export.flush(self.setup, timeout, wait=True)
        if decided.later:
            self.after_ready_job = in_background(lambda: self._after_ready(decided.later),
                                                 name="otel-coldstart-after-ready")
        elif decided.summary:
            self.print_summary(breakdown)

    def _drain(self, decided: Plan, started: float) -> None:
        """Flush and shut down what we own, all within one deadline (traces and metrics side
        by side); then, if spans were meant for somewhere that did not confirm them in time,
        write them to the local file and say so. Where nothing listens at the OTLP endpoint
        (the connection is refused: ``opentelemetry-instrument`` with no collector), nobody
        waits for the exporters' retries."""
        reserve = min(0.5, 0.1 * decided.deadline_s) if decided.fallback else 0.0
        refused = decided.fallback and export.collector_refuses("traces")
        # One deadline from the start of finish(): ending the start-up (making metrics, say)
        # spends it too, and a moment is kept for the fallback file (SIGTERM kills at it).
        deadline = started if refused else started + decided.deadline_s - reserve
        if self.after_ready_job is not None:  # the summary and metrics after ready(): let them finish
            self.after_ready_job.join(max(0.0, deadline - time.monotonic()))
        budget = max(0.0, deadline - time.monotonic())
        delivered = threading.Event()

        def traces() -> None:
            if export.finish(self.setup, budget):
                delivered.set()

        def left() -> float:  # at the exit the jobs run one after the other here (_bounded.py)
            return max(0.0, deadline - time.monotonic())

        jobs = [in_background(traces)]
        metrics_setup = self.metrics
        if metrics_setup is not None:
            from .metrics import flush as flush_metrics

            if metrics_setup.owned:
                jobs.append(in_background(lambda: metrics_setup.close(left())))
            else:
                jobs.append(in_background(lambda: flush_metrics(metrics_setup, left())))
        for job in jobs:
            job.join(max(0.0, deadline - time.monotonic()))
        if decided.fallback and not delivered.is_set():
            self._fall_back(refused)

    def _fall_back(self, refused: bool = False) -> None:
        """The exporters did not confirm the start-up within the deadline (no collector, one
        that never answers, one that refused a batch): write it to the local file, say where
        in one line, and keep the SDK's own exit-time shutdown from retrying the same exports
        past the deadline (it would hold the exit 10 s per signal)."""
        with internal_errors("fallback file"):
            path = export.default_trace_path(self.options.output_dir)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            written = export.write_records(path, self.session.kept_spans(), self.session.resource)
            if written:
                self.fallback_path = path
            where = f"written to {path} instead" if written else f"and could not be written to {path} either"
            if refused:
                host, port = export.otlp_endpoint("traces") or ("?", 0)
                why = f"nothing listens at {host}:{port} (connection refused)"
            else:
                why = f"no confirmation within {self.options.export_timeout_s:g} s"
            sys.stderr.write(f"otel-coldstart: the start-up's trace was not delivered to {self.setup.description}: "
                             f"{why}; {where}\n")
            sys.stderr.flush()
        with internal_errors("fallback"):
            if self.plans and self.plans[-1].reason in _EXITING:
                export.skip_sdk_exit_shutdown(self.setup.provider, self.metrics.provider if self.metrics else None)

    def _after_ready(self, later: tuple[str, ...]) -> None:
        """On a thread of ours after ready(): the summary, then the metrics only we push."""
        breakdown = self.breakdown()
        if "summary" in later:
            self.print_summary(breakdown)
        if "metrics" in later and self.make_metrics_later() is not None:
            self.record_metrics(breakdown)
            with internal_errors("metrics flush"):
                from .metrics import flush as flush_metrics

                flush_metrics(self.metrics, self.options.export_timeout_s)

    def release(self) -> None:
        """``uninstrument()``: end if still open, drain, and let go of what we made."""
        self.finish(semconv.END_UNINSTRUMENTED)
        if self.progress is not None:
            self.progress.stop()

    # --- what the end computes -------------------------------------------------------------

    def breakdown(self):
        """The breakdown of the start-up from the session's ledger, or None if it fails."""
        try:
            from .analyze.breakdown import compute_breakdown  # needed only now

            records = self.session.records()
            root = next(r for r in reversed(records) if r.is_root)
            return compute_breakdown(root, records)
        except Exception:
            report_internal_error("breakdown")
            return None

    def record_metrics(self, breakdown) -> None:
        if breakdown is None or self.metrics is None:
            return
        with internal_errors("metrics"):
            from .metrics import StartupMetrics, identifying_attributes

            session = self.session
            labels = identifying_attributes(session.resource, self.options.metric_attributes)
            StartupMetrics(self.metrics.provider).record(breakdown, labels, session.records(),
                                                         trace_context=session.root_context)

    def print_summary(self, breakdown) -> None:
        if breakdown is None:
            return
        with internal_errors("summary"):
            from .analyze.render import render_text
            from .analyze.report import Report

            out = sys.stderr
            out.write("\n[otel-coldstart] start-up breakdown\n")
            render_text(Report.of([breakdown]), out)
            dropped = getattr(self.setup.provider, "dropped_spans", 0)
            if isinstance(dropped, int) and dropped > 0:
                out.write(f"  {dropped} span(s) dropped before export (the export queue was full)\n")
            if self.setup.file_path:
                outcome = self.setup.file_exporter.outcome() if self.setup.file_exporter else ""
                out.write(f"  {outcome}\n")
                if outcome.startswith("trace written to"):  # only a file that is there
                    out.write(f"  analyze it again: otel-coldstart analyze {self.setup.file_path}\n")
            out.flush()


# --- where metrics go ------------------------------------------------------------------------


def _end_patches(session) -> None:
    """Each loaded patch module's ``end_of_startup`` (its open handles, captures, batches),
    in patching order; one that fails does not keep the others from ending theirs. Read at
    the end, not at instrument(): a patch module is imported when its library is."""
    for module in patches.loaded():
        end_hook = getattr(module, "end_of_startup", None)
        if end_hook is not None:
            with internal_errors(f"end of start-up in {module.__name__}"):
                end_hook(session)


def metrics_wanted(meter_provider, prometheus_port) -> bool:
    """Whether metrics have anywhere to go. Without a provider passed, an exporter named in
    the environment or an SDK meter provider (which cannot exist unless its module was
    imported), they would go to the API's no-op provider: then otel_coldstart.metrics is
    not imported and nothing is recorded."""
    return (meter_provider is not None or prometheus_port is not None
            or bool(_otel_env.exporter_names("metrics"))
            or export.otlp_endpoint_configured("metrics")
            or "opentelemetry.sdk.metrics" in sys.modules)


def metrics_can_wait(meter_provider, prometheus_port) -> bool:
    """Whether metrics go only to exporters we make and that push (OTLP, console): nobody
    reads them in this process, so they can be made later, on a thread of ours. A provider
    passed or set globally, or a Prometheus endpoint (scraped at any time), is made now."""
    return (meter_provider is None and prometheus_port is None
            and "opentelemetry.sdk.metrics" not in sys.modules
            and "prometheus" not in os.environ.get("OTEL_METRICS_EXPORTER", "").lower()
            and metrics_wanted(None, None))


def configure_metrics(meter_provider, prometheus_port):
    if not metrics_wanted(meter_provider, prometheus_port):
        return None
    try:
        from .metrics import configure_metrics as configure

        return configure(meter_provider, prometheus_port)
    except Exception:
        report_internal_error("metrics setup")
        return None


# --- the root's rank ---------------------------------------------------------------------------

# Launchers' variables, most specific first: torchrun/torch.distributed, Open MPI, MPICH/
# Intel MPI, Slurm.
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def _first_int(names) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def rank_attributes() -> dict[str, Any]:
    """Rank, world size and local rank of this process: from torch.distributed once its
    process group is up (the truth, and the only source where a framework such as vLLM passes
    ranks as arguments, not variables), else from the launcher's environment variables.

    Read at instrument() and again when the start-up ends, because the process group is
    usually created after instrument(). torch is never imported here.
    """
    attrs: dict[str, Any] = {}
    rank, world_size = _first_int(_RANK_VARS), _first_int(_WORLD_SIZE_VARS)
    local_rank = _first_int(_LOCAL_RANK_VARS)
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            rank, world_size = distributed.get_rank(), distributed.get_world_size()
    except Exception:  # a half-torn-down process group: keep what the environment says
        pass
    if rank is not None:
        attrs[semconv.RANK] = rank
    if world_size is not None:
        attrs[semconv.WORLD_SIZE] = world_size
    if local_rank is not None:
        attrs[semconv.LOCAL_RANK] = local_rank
    return attrs
