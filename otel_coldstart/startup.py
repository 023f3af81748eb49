"""One start-up: everything it owns, and the one place where it ends.

A :class:`Startup` is made by ``instrument()`` (controller.py) and dropped by
``uninstrument()`` or a fork. It owns:

- the **session** (session.py: the root span, the span plumbing the patches use, the
  open-work registry, the aggregates, each patch module's per-start-up state, per-thread
  values such as the ambient parents of ``safe_open`` handles);
- the **options** (options.py), the **export set-up** (export.py) and the **metrics** set-up;
- the **storage ledger** (patches/_storage.py: each file's residency before its first read,
  and the storage figures still to settle);
- the **progress board** and its monitor thread (inflight.py);
- the **after-ready job** (the summary and the metrics only we push, on a thread of ours).

It ends in one method, :meth:`Startup.finish`, for every reason: ``ready()``, exit,
uncaught exception (Ctrl-C included), SIGTERM and ``uninstrument()``. ``finish`` first
computes a :class:`~otel_coldstart.plan.Plan` (plan.py: a pure function of the reason and
what the start-up has) and then carries it out; :meth:`Startup._end` lists, in order, what
the end of a start-up settles. Anything that is per process (the patch sets of originals,
caches of file facts, the SIGTERM watcher, the import hooks) stays in module globals and
the controller.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from . import _otel_env, ending, export, own_cost, own_tracing, patches, semconv, session as _session
from ._bounded import _Done, in_background
from ._errors import internal_errors, report_internal_error
from .options import Options
from .patches._storage import StorageLedger
from .plan import EXITING, Plan, plan
from .rank import rank_attributes

if TYPE_CHECKING:  # pragma: no cover
    from .first_use import FollowUp
    from .inflight import ProgressBoard
    from .metrics import StartupMetrics


class Startup:
    """Everything one start-up owns (see the module's docstring); ended by :meth:`finish`."""

    def __init__(self, session: _session.StartupSession, setup: export.ExportSetup, options: Options,
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
        self.progress: ProgressBoard | None = None  # once started
        self.after_ready_job: threading.Thread | _Done | None = None
        self.own_setup_s: float | None = None  # the plugin's import and set-up, where the start-up counts it
        self.first_use: FollowUp | None = None  # files still partly on storage at ready(), followed
        self._first_use_metrics: tuple[StartupMetrics, dict] | None = None  # its counter, and the labels added to it
        self.plans: list[Plan] = []  # what finish() decided, in order (for tests and debugging)
        self.lock = threading.Lock()
        self._finish_lock = threading.RLock()

    # --- while it runs ---------------------------------------------------------------------

    def _count_first_use(self, nbytes: int) -> None:
        """On the monitor thread: bytes the first requests read, onto their counter (metrics
        only we push are made now if the after-ready job has not made them yet)."""
        metrics_setup = self.metrics_now()
        if metrics_setup is None:
            return
        from .metrics import StartupMetrics

        if self._first_use_metrics is None:
            self._first_use_metrics = (StartupMetrics(metrics_setup.provider), self.metric_labels())
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

    def start_inflight(self, metrics_setup) -> None:
        """Progress records, in-flight gauges and the stall watchdog (inflight.py). The first
        record is written at once, on the monitor thread: the start-up is on disk (or sent)
        from instrument() on, so that even a process killed in its first second leaves a
        file ``analyze`` reads as one killed start-up. Each record is followed by a flush of
        our own provider: waited for in the file mode (a local append), not over OTLP. A
        provider the host configured keeps its own schedule."""
        from . import inflight

        options = self.options
        with internal_errors("inflight start"):
            self.progress = inflight.start_for(
                self.session, progress_interval_s=options.progress_interval_s, stall_after_s=options.stall_after_s,
                flush=self._own_flush(), meter_provider=metrics_setup.provider if metrics_setup is not None else None,
                labels=self.metric_labels() if metrics_setup is not None else None,
                prepare=(lambda: self.make_metrics_later()) if self.metrics_later else None,
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
                if self.metrics is not None and self.progress is not None and not self.session.ended:
                    with internal_errors("inflight gauges"):
                        from .inflight import register_gauges

                        register_gauges(self.metrics.provider, self.progress, self.metric_labels())
            return self.metrics

    def metrics_now(self):
        """The metrics set-up, made now if it is one only we push (on a thread of ours)."""
        return self.make_metrics_later() if self.metrics_later else self.metrics

    def metric_labels(self) -> dict:
        """The attributes each of this start-up's metrics carries (the metrics module: only
        imported where metrics exist)."""
        from .metrics import identifying_attributes

        return identifying_attributes(self.session.resource, self.options.metric_attributes)

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
            if decided.give_back_sigterm:  # first: from here on a SIGTERM is the host's to handle
                ending.SIGTERM.release()
            if decided.end:
                self._end(decided, exception_type)
            if decided.drain:
                self._drain(decided, started)
            return decided

    def _end(self, decided: Plan, exception_type: str | None) -> None:
        """Everything the end of a start-up does, in order (once; a forked copy does nothing)."""
        session = self.session
        if not session.end_work(ready=decided.ready, reason=decided.reason, exception_type=exception_type):
            return
        # Settled before the root span ends, in this order; one that fails does not keep the
        # others from running.
        for step in (self._settle_rank,  # the process group is usually made after instrument()
                     self._end_patches,  # each patch's open work: handles, captures, import batches
                     self.storage.settle_all,  # the storage figures of files read lazily
                     self._follow_first_use,  # before the board stops: its thread takes the follow-up
                     self._note_dropped_spans,
                     self._stop_progress,
                     self._note_own_cost):  # last: every step above is ours too
            with internal_errors(f"end of start-up: {step.__name__}"):
                step()
        session.end_root()  # the aggregates still collecting, then the root, saying why it ended
        self._unpatch_hot_path()
        self._record_and_report(decided)

    def _settle_rank(self) -> None:
        self.session.root_attributes.update(rank_attributes())

    def _end_patches(self) -> None:
        """Each loaded patch module's ``end_of_startup`` (its open handles, captures, batches),
        in patching order; one that fails does not keep the others from ending theirs. Read at
        the end, not at instrument(): a patch module is imported when its library is."""
        for module in patches.loaded():
            end_hook = getattr(module, "end_of_startup", None)
            if end_hook is not None:
                with internal_errors(f"end of start-up in {module.__name__}"):
                    end_hook(self.session)

    def _follow_first_use(self) -> None:
        """At ready(): follow the files the storage ledger found still mapped with pages out
        of the page cache (first_use.py); nothing when every file was resident."""
        files = self.storage.lazily_unread
        if files and self.session.end_reason == semconv.END_READY:
            from . import first_use

            self.first_use = first_use.start(files, self.session.end_ns or time.time_ns(), self.progress,
                                             self._own_flush(), self._count_first_use)

    def _note_dropped_spans(self) -> None:
        """Spans our provider could not queue (a bound was hit): said on the root."""
        dropped = getattr(self.setup.provider, "dropped_spans", 0)
        if isinstance(dropped, int) and dropped > 0:
            self.session.root_attributes[semconv.EXPORT_DROPPED_SPANS] = dropped

    def _note_own_cost(self) -> None:
        """What the plugin itself cost this start-up (own_cost.py), on the root."""
        own_cost.note_on_root(self.session, self.own_setup_s)

    def _stop_progress(self) -> None:
        """No more progress records; the gauges report nothing (a follow-up keeps the thread)."""
        if self.progress is not None:
            self.progress.stop()

    @staticmethod
    def _unpatch_hot_path() -> None:
        """Steady-state serving must pay nothing: the per-call patches go at the end."""
        for module in patches.loaded():
            if module.HOT_PATH:
                with internal_errors(f"unpatch {module.__name__}"):
                    module.unpatch()

    def _record_and_report(self, decided: Plan) -> None:
        """Metrics recorded, the trace written, the summary printed: now, or (after ready())
        on a thread of ours, as ``decided``."""
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
        waits for the exporters' retries. Before it, what runs past ready() ends, said why: the
        first-use follow-up (a last sample) and a first request still running (interrupted)."""
        if self.first_use is not None:
            with internal_errors("first-use end"):
                self.first_use.end(decided.reason)
        first_token = sys.modules.get("otel_coldstart.first_token")  # loaded by a first request only
        if first_token is not None:
            with internal_errors("first-request end"):
                first_token.end_running(self.session, decided.reason)
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
            if self.plans and self.plans[-1].reason in EXITING:
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
            from .metrics import StartupMetrics

            session = self.session
            StartupMetrics(self.metrics.provider).record(breakdown, self.metric_labels(), session.records(),
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


def metrics_wanted(meter_provider, prometheus_port) -> bool:
    """Whether metrics have anywhere to go. Without a provider passed, an exporter named in
    the environment or an SDK meter provider (which cannot exist unless its module was
    imported), they would go to the API's no-op provider: then otel_coldstart.metrics is
    not imported and nothing is recorded."""
    return (meter_provider is not None or prometheus_port is not None
            or bool(_otel_env.exporter_names("metrics"))
            or _otel_env.otlp_endpoint_configured("metrics")
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
