"""The spans the plugin records without the OpenTelemetry SDK (own_tracing.py) against the
SDK itself: the same operations on an SDK tracer and on ours must export the same OTLP JSON
(ids aside), the same trace flags and trace state, and the same resource."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import threading
import time
import types

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry import context as otel_context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags, TraceState

from _examples import examples
from otel_coldstart import export, own_tracing
from otel_coldstart.otlp_json import spans_to_otlp_json_line


def _otlp_document(spans) -> dict:
    return json.loads(spans_to_otlp_json_line(spans))

# The own provider mirrors the SDK from own_tracing.OWN_PROVIDER_MIN_SDK on; with an older SDK
# (CI's oldest-supported run) the SDK's own provider is used and there is nothing to compare.
pytestmark = pytest.mark.skipif(not own_tracing.usable(), reason="an SDK the own provider does not mirror")

T0 = 1_700_000_000_000_000_000

# --- two tracers side by side -----------------------------------------------------------------


class Pair:
    """An SDK tracer and ours, over the same resource, each collecting what it exports."""

    def __init__(self) -> None:
        attributes = {"service.name": "t", "process.pid": 1}
        self.sdk_exporter = InMemorySpanExporter()
        self.sdk_provider = TracerProvider(resource=Resource(attributes), shutdown_on_exit=False)
        self.sdk_provider.add_span_processor(SimpleSpanProcessor(self.sdk_exporter))
        self.ours_exported: list = []
        self.own_provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource(attributes),
                                                          Collecting(self.ours_exported))

    def tracers(self, name="scope", version="1.0"):
        return self.sdk_provider.get_tracer(name, version), self.own_provider.get_tracer(name, version)

    def documents(self) -> tuple[dict, dict]:
        self.own_provider.force_flush()
        return (_without_ids(_otlp_document(self.sdk_exporter.get_finished_spans())),
                _without_ids(_otlp_document(self.ours_exported)))

    def handed_to_sdk_exporters(self) -> dict:
        """Our spans as SdkExporters hands them to an SDK exporter (OTLP, console)."""
        self.own_provider.force_flush()
        converter = own_tracing.SdkExporters([], lambda name, exc: None)
        return _without_ids(_otlp_document([converter.readable(span) for span in self.ours_exported]))


class Collecting:
    """A sink that keeps what it is given (``fail``: and says the export failed)."""

    def __init__(self, into: list | None = None) -> None:
        self.into = [] if into is None else into
        self.batches: list[list] = []

    def export(self, spans) -> bool:
        self.batches.append(list(spans))
        self.into.extend(spans)
        return True

    def shutdown(self) -> None:
        pass


def _without_ids(document: dict) -> dict:
    """Ids replaced by their order of first appearance (each side draws its own)."""
    seen: dict[str, str] = {}

    def walk(node):
        if isinstance(node, dict):
            return {k: (seen.setdefault(v, f"id{len(seen)}") if k in ("traceId", "spanId", "parentSpanId")
                        else walk(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(document)


# --- the operations hypothesis draws ----------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "coldstart.phase", "k" * 40, ""])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True),
                     st.text(max_size=8), st.binary(max_size=4))
_values = st.one_of(_scalars, st.lists(_scalars, max_size=3), st.tuples(st.integers(), st.text(max_size=3)),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
_attributes = st.one_of(st.none(), st.dictionaries(_keys, _values, max_size=5))
_ops = st.lists(st.one_of(
    st.tuples(st.just("set_attribute"), _keys, _values),
    st.tuples(st.just("set_attributes"), st.dictionaries(_keys, _values, max_size=4)),
    st.tuples(st.just("add_event"), st.text(max_size=5), _attributes, st.integers(0, 10 ** 6)),
    st.tuples(st.just("record_exception"), st.booleans(), _attributes),
    st.tuples(st.just("status"), st.sampled_from(["ok", "error", "unset", "error-code", "ok-code-desc"]),
              st.one_of(st.none(), st.text(max_size=5))),
    st.tuples(st.just("update_name"), st.text(max_size=6)),
    st.tuples(st.just("many_attributes"), st.integers(120, 140)),
    st.tuples(st.just("many_events"), st.integers(125, 135)),
    st.tuples(st.just("add_link"), st.booleans(), _attributes),
    st.tuples(st.just("many_links"), st.integers(125, 135)),
), max_size=8)
# Links given at the start: a valid context, or an invalid one kept only for its attributes.
_start_links = st.lists(st.tuples(st.booleans(), _attributes), max_size=3)


def _raise_and_catch() -> BaseException:
    try:
        raise ValueError("boom")
    except ValueError as error:
        return error


_ERROR = _raise_and_catch()


def _apply(span, op) -> None:
    kind = op[0]
    if kind == "set_attribute":
        span.set_attribute(op[1], op[2])
    elif kind == "set_attributes":
        span.set_attributes(op[1])
    elif kind == "add_event":
        span.add_event(op[1], op[2], timestamp=T0 + op[3])
    elif kind == "record_exception":
        span.record_exception(_ERROR, attributes=op[2], timestamp=T0 + 5, escaped=op[1])
    elif kind == "status":
        which, description = op[1], op[2]
        if which == "ok":
            span.set_status(Status(StatusCode.OK))
        elif which == "error":
            span.set_status(Status(StatusCode.ERROR, description))
        elif which == "unset":
            span.set_status(Status(StatusCode.UNSET))
        elif which == "error-code":
            span.set_status(StatusCode.ERROR, description)
        else:
            span.set_status(Status(StatusCode.OK), description)
    elif kind == "update_name":
        span.update_name(op[1])
    elif kind == "many_attributes":
        span.set_attributes({f"n{i}": i for i in range(op[1])})
    elif kind == "many_events":
        for i in range(op[1]):
            span.add_event(f"e{i}", {"i": i}, timestamp=T0 + i)
    elif kind == "add_link":
        span.add_link(_link_context(op[1]), op[2])
    elif kind == "many_links":
        for i in range(op[1]):
            span.add_link(SpanContext(0xABC, 0x100 + i, is_remote=True), {"i": i})


def _link_context(valid: bool) -> SpanContext:
    return SpanContext(0xABC, 0xDEF, is_remote=True) if valid else SpanContext(0, 0, is_remote=False)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start_attributes=_attributes, ops=_ops, after_end=_ops, child_ops=_ops, kind=st.sampled_from(list(trace.SpanKind)),
       start_links=_start_links)
def test_the_same_operations_export_the_same_span(start_attributes, ops, after_end, child_ops, kind, start_links):
    logging.disable(logging.CRITICAL)  # the SDK's (and our) warnings for invalid values
    try:
        pair = Pair()
        for tracer in pair.tracers():
            links = [trace.Link(_link_context(valid), attributes) for valid, attributes in start_links]
            parent = tracer.start_span("parent", kind=kind, attributes=start_attributes, start_time=T0, links=links)
            for op in ops:
                _apply(parent, op)
            child = tracer.start_span("child", context=trace.set_span_in_context(parent), start_time=T0 + 1)
            for op in child_ops:
                _apply(child, op)
            child.end(end_time=T0 + 2)
            parent.end(end_time=T0 + 3)
            for op in after_end:  # after end(): ignored, as the SDK ignores them
                _apply(parent, op)
            parent.end(end_time=T0 + 4)
        sdk, ours = pair.documents()
        handed = pair.handed_to_sdk_exporters()
    finally:
        logging.disable(logging.NOTSET)
    assert ours == sdk
    assert handed == sdk


RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)  # an API older than the flag has none (1.27)


@pytest.mark.parametrize("flags,state", [
    (TraceFlags.SAMPLED, None),
    (TraceFlags.SAMPLED | RANDOM, TraceState([("vendor", "x")])),
    (TraceFlags.DEFAULT, TraceState([("vendor", "y")])),
    (RANDOM, None),
])
@pytest.mark.parametrize("remote", [True, False])
def test_parent_decides_sampling_flags_and_state_as_the_default_sampler(flags, state, remote):
    parent = SpanContext(0x1234, 0x5678, is_remote=remote, trace_flags=TraceFlags(flags), trace_state=state)
    context = trace.set_span_in_context(NonRecordingSpan(parent))
    pair = Pair()
    made = [tracer.start_span("s", context=context, start_time=T0) for tracer in pair.tracers()]
    for span in made:
        span.end(end_time=T0 + 1)
    sdk_span, own_span = made
    assert type(sdk_span).__name__ != "NonRecordingSpan" or isinstance(own_span, NonRecordingSpan)
    assert sdk_span.is_recording() == own_span.is_recording()
    sdk_context, own_context = sdk_span.get_span_context(), own_span.get_span_context()
    assert own_context.trace_id == sdk_context.trace_id == 0x1234
    assert own_context.trace_flags == sdk_context.trace_flags
    assert own_context.trace_state == sdk_context.trace_state
    assert own_context.is_remote is sdk_context.is_remote is False
    sdk, ours = pair.documents()
    assert ours == sdk  # an unsampled parent: nothing exported on either side


def test_a_root_span_is_sampled_with_a_random_trace_id_flag():
    pair = Pair()
    spans = [tracer.start_span("root", start_time=T0) for tracer in pair.tracers()]
    assert spans[0].get_span_context().trace_flags == spans[1].get_span_context().trace_flags
    if RANDOM:
        assert spans[1].get_span_context().trace_flags.random_trace_id


def test_start_as_current_span_records_the_escaping_exception_as_the_sdk_does():
    pair = Pair()
    for tracer in pair.tracers():
        with pytest.raises(KeyError):
            with tracer.start_as_current_span("outer", start_time=T0) as outer:
                assert trace.get_current_span() is outer
                raise KeyError("k")
    sdk, ours = pair.documents()
    for document in (sdk, ours):  # the exception event's and the end's times are the clock's
        span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        span.pop("endTimeUnixNano")
        for event in span["events"]:
            event.pop("timeUnixNano")
            for attribute in event["attributes"]:
                if attribute["key"] == "exception.stacktrace":  # different frames: ours, the SDK's
                    attribute["value"] = "<stack>"
    assert ours == sdk
    assert ours["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["status"]["code"] == 2


def test_span_ids_do_not_repeat_when_the_host_seeds_random():
    """vLLM seeds Python's random with the same value on every rank; the SDK's generator
    would then give every rank the same span ids in one trace. Ours do not follow it."""
    tracer = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Collecting()).get_tracer("t")
    ids = set()
    for _ in range(3):
        random.seed(0)
        ids.add(tracer.start_span("s").get_span_context().span_id)
    assert len(ids) == 3


# --- batching and export ----------------------------------------------------------------------


def test_a_flush_sends_batches_of_512_in_end_order():
    sink = Collecting()
    batches = sink.batches
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), sink)
    tracer = provider.get_tracer("t")
    provider._start_worker = lambda: None  # no thread: this test flushes by hand
    for i in range(1100):
        tracer.start_span(f"s{i}", start_time=T0).end(end_time=T0 + 1)
    assert batches == []
    assert provider.force_flush()
    assert [len(b) for b in batches] == [512, 512, 76]
    assert [s.name for b in batches for s in b] == [f"s{i}" for i in range(1100)]


def test_a_full_queue_drops_and_counts_as_the_batch_processor_does_after_the_start_up():
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Collecting())
    provider._start_worker = lambda: None
    tracer = provider.get_tracer("t")
    for _ in range(own_tracing.MAX_QUEUE + 10):  # during the start-up the ledger keeps them all anyway
        tracer.start_span("s").end()
    assert provider.dropped_spans == 0
    provider.force_flush()
    provider.export_in_background()  # the start-up is over: the SDK processor's bound
    for _ in range(own_tracing.MAX_QUEUE + 10):
        tracer.start_span("s").end()
    assert provider.dropped_spans == 10


class LocalCollecting(Collecting):
    """A sink that, like the OTLP JSON file, never waits on a network."""

    local = True


def test_a_full_queue_for_a_local_file_is_written_by_the_thread_that_fills_it_never_dropped():
    """The CI run that lost 491 of 20,000 spans after ready(): the worker fell behind a tight
    loop and the SDK's bound dropped the rest. A local file takes them from the host thread."""
    sink = LocalCollecting()
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), sink)
    provider._start_worker = lambda: None  # no worker at all: the host thread must write
    provider.export_in_background()
    tracer = provider.get_tracer("t")
    for i in range(own_tracing.MAX_QUEUE * 3 + 7):
        tracer.start_span(f"s{i}").end()
    assert provider.dropped_spans == 0
    assert len(provider._pending) <= own_tracing.MAX_QUEUE
    provider.force_flush()
    assert [s.name for s in sink.into] == [f"s{i}" for i in range(own_tracing.MAX_QUEUE * 3 + 7)]  # in end order


def test_a_local_file_that_refuses_writes_drops_and_counts_instead_of_growing():
    class Refusing(LocalCollecting):
        def export(self, spans) -> bool:
            return False

    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Refusing())
    provider._start_worker = lambda: None
    provider.export_in_background()
    tracer = provider.get_tracer("t")
    for _ in range(own_tracing.MAX_QUEUE * 3):
        tracer.start_span("s").end()
    assert provider.dropped_spans >= own_tracing.MAX_QUEUE
    assert len(provider._pending) <= own_tracing.MAX_QUEUE


def test_a_span_ended_inside_a_local_export_does_not_wait_on_itself():
    provider = None

    class EndsSpans(LocalCollecting):
        def export(self, spans) -> bool:
            if not self.batches:  # the first write ends spans of its own (an instrumented write)
                for _ in range(own_tracing.MAX_QUEUE + 1):
                    provider.get_tracer("inner").start_span("inner").end()
            return super().export(spans)

    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), EndsSpans())
    provider._start_worker = lambda: None
    provider.export_in_background()
    tracer = provider.get_tracer("t")
    done = threading.Event()

    def burst():
        for _ in range(own_tracing.MAX_QUEUE + 1):
            tracer.start_span("s").end()
        done.set()

    threading.Thread(target=burst, daemon=True).start()
    assert done.wait(20)
    assert provider.dropped_spans >= 1  # the inner spans beyond the bound, not a deadlock


def _wait_for(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_spans_go_out_by_themselves_within_the_schedule_delay_during_and_after_the_start_up(monkeypatch):
    monkeypatch.setattr(own_tracing, "SCHEDULE_DELAY_S", 0.2)
    exported = []
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Collecting(exported))
    tracer = provider.get_tracer("t")
    tracer.start_span("during").end()
    assert _wait_for(lambda: len(exported) == 1)  # durable as it goes: nobody flushed
    provider.export_in_background()
    tracer.start_span("after").end()
    assert _wait_for(lambda: len(exported) == 2)
    assert [s.name for s in exported] == ["during", "after"]
    provider.shutdown()


def test_a_full_batch_wakes_the_worker_at_once(monkeypatch):
    """The worker's docstring promise, which the earlier provider did not keep: 512 waiting
    spans go out without waiting for the schedule delay."""
    monkeypatch.setattr(own_tracing, "SCHEDULE_DELAY_S", 3600.0)
    exported = []
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Collecting(exported))
    tracer = provider.get_tracer("t")
    for _ in range(own_tracing.MAX_EXPORT_BATCH):
        tracer.start_span("s").end()
    assert _wait_for(lambda: len(exported) == own_tracing.MAX_EXPORT_BATCH)
    provider.shutdown()


class _ThreadNoting(Collecting):
    """A sink that notes which thread exported each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def export(self, spans) -> bool:
        self.threads.append(threading.current_thread().name)
        return super().export(spans)


def test_a_flush_asked_of_the_worker_is_written_when_it_returns_and_starts_no_thread(monkeypatch):
    """The in-flight monitor's flush after each record: before, each one started a thread."""
    monkeypatch.setattr(own_tracing, "SCHEDULE_DELAY_S", 3600.0)  # only the flush sends anything
    sink = _ThreadNoting()
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), sink)
    tracer = provider.get_tracer("t")
    assert provider.flush_on_worker(5.0)  # nothing ended yet: nothing to do, no worker started
    assert provider._worker is None
    tracer.start_span("first").end()
    started = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real_start(self))[1])
    for round_ in range(20):
        tracer.start_span(f"s{round_}").end()
        assert provider.flush_on_worker(5.0)
        assert [s.name for s in sink.into][-1] == f"s{round_}"  # written when the call returns
    tracer.start_span("through export.flush").end()
    export.flush(types.SimpleNamespace(provider=provider), 5.0, wait=True)  # what the monitor calls
    assert sink.into[-1].name == "through export.flush"
    assert started == []
    assert set(sink.threads) == {"otel-coldstart-span-export"}
    provider.shutdown()
    assert provider.flush_on_worker(5.0)  # after shutdown: at once


def test_a_flush_asked_of_the_worker_waits_at_most_its_timeout_for_a_hung_export():
    release = threading.Event()

    class Hanging(Collecting):
        def export(self, spans) -> bool:
            release.wait(30)
            return super().export(spans)

    sink = Hanging()
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), sink)
    provider.get_tracer("t").start_span("s").end()
    began = time.monotonic()
    assert provider.flush_on_worker(0.3) is False
    assert time.monotonic() - began < 5
    assert provider.flush_on_worker(0.0) is True  # not waited for: only asked
    release.set()
    assert provider.flush_on_worker(10.0)
    assert [s.name for s in sink.into] == ["s"]
    provider.shutdown()


def test_a_flush_asked_of_the_worker_says_when_the_sink_refused():
    sink = Collecting()
    sink.export = lambda spans: False
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), sink)
    provider.get_tracer("t").start_span("s").end()
    assert provider.flush_on_worker(5.0) is False
    assert provider.failed_exports == 1
    provider.shutdown()


@pytest.mark.process
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_flush_asked_in_a_forked_child_is_done_by_the_childs_own_worker(tmp_path):
    """The parent's worker does not exist in the child: the child's first flush starts its own
    and writes the child's spans (the parent's queue is not the child's to write)."""
    path = tmp_path / "child.jsonl"
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), export.OtlpJsonFile(str(tmp_path / "p.jsonl")))
    tracer = provider.get_tracer("t")
    tracer.start_span("parent").end()
    assert provider.flush_on_worker(5.0)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its span was written by its own flush
        try:
            provider.sink = export.OtlpJsonFile(str(path))
            tracer.start_span("child").end()
            ok = provider.flush_on_worker(5.0) and path.exists() and '"child"' in path.read_text()
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert '"parent"' not in path.read_text()
    provider.shutdown()


def test_spans_handed_to_sdk_exporters_read_as_the_sdks_own():
    """OTLP and console exporters get SDK ReadableSpans: the protobuf encoding of ours equals
    the SDK's, ids aside."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    pair = Pair()
    handed = []
    exporters = own_tracing.SdkExporters([("memory", lambda: _Recording(handed))], lambda name, exc: None)
    pair.own_provider.sink = exporters
    for tracer in pair.tracers():
        span = tracer.start_span("s", attributes={"a": 1, "l": ["x"]}, start_time=T0)
        span.add_event("e", {"b": True}, timestamp=T0 + 1)
        span.record_exception(_ERROR, timestamp=T0 + 2)
        span.set_status(Status(StatusCode.ERROR, "bad"))
        span.end(end_time=T0 + 3)
    pair.own_provider.force_flush()
    assert len(handed) == 1
    sdk = _without_ids(MessageToDict(encode_spans(pair.sdk_exporter.get_finished_spans())))
    ours = _without_ids(MessageToDict(encode_spans(handed)))
    assert ours == sdk


class _Recording:
    def __init__(self, into: list) -> None:
        self.into = into

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.into.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def test_an_exporter_that_cannot_be_made_is_left_out_once():
    failures = []

    def refuse():
        raise ValueError("bad endpoint")

    exporters = own_tracing.SdkExporters([("otlp_proto_http", refuse)], lambda name, exc: failures.append(name))
    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), exporters)
    provider.get_tracer("t").start_span("s").end()
    assert provider.force_flush() and provider.force_flush()
    assert failures == ["otlp_proto_http"]


# --- resource ---------------------------------------------------------------------------------

_RESOURCE_VARIABLES = ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS")


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_SERVICE_NAME": "vllm-serve", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,model=llama"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,k=v"},
    {"OTEL_RESOURCE_ATTRIBUTES": "telemetry.sdk.language=x, spaced = v%20w ,broken,=empty,host.name=mine"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=set-by-user,process.pid=7"},
    {"OTEL_SERVICE_NAME": ""},
])
def test_default_resource_without_the_sdk_equals_resource_create(monkeypatch, env):
    for name in _RESOURCE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ours = export.default_resource()
    assert isinstance(ours, own_tracing.OwnResource)
    theirs = Resource.create({"process.pid": os.getpid(), "host.name": __import__("socket").gethostname()})
    assert list(ours.attributes.items()) == list(theirs.attributes.items())  # order too: it is the file's
    assert ours.schema_url == theirs.schema_url


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet=st.sampled_from("ab=,% 2F.\u00e9"), max_size=30))
def test_resource_attributes_variable_is_parsed_as_the_sdk_parses_it(value):
    saved = os.environ.get("OTEL_RESOURCE_ATTRIBUTES")
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = value
    logging.disable(logging.CRITICAL)
    try:
        ours = own_tracing.sdk_default_resource_attributes()
        theirs = Resource.create({})
    finally:
        logging.disable(logging.NOTSET)
        if saved is None:
            os.environ.pop("OTEL_RESOURCE_ATTRIBUTES")
        else:
            os.environ["OTEL_RESOURCE_ATTRIBUTES"] = saved
    expected = dict(theirs.attributes)
    if ours.get("service.name") is None:  # Resource.create's default, added by default_resource()
        expected.pop("service.name", None)
    assert ours == expected


def test_a_configured_detector_leaves_the_resource_to_the_sdk(monkeypatch):
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "process")
    assert isinstance(export.default_resource(), Resource)


@pytest.mark.parametrize("variable", ["OTEL_TRACES_SAMPLER", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_BSP_SCHEDULE_DELAY",
                                      "OTEL_PYTHON_ID_GENERATOR"])
def test_sdk_settings_in_the_environment_bring_the_sdk_back(monkeypatch, tmp_path, variable):
    monkeypatch.setenv(variable, "1")
    setup = export.configure_tracing(None, str(tmp_path))
    assert isinstance(setup.provider, TracerProvider)
    monkeypatch.delenv(variable)
    setup = export.configure_tracing(None, str(tmp_path))
    assert isinstance(setup.provider, own_tracing.OwnTracerProvider)


def test_context_nests_users_spans_under_ours():
    """What a user's (or vLLM's) tracer starts inside our span is its child."""
    pair = Pair()
    ours = pair.own_provider.get_tracer("otel_coldstart").start_span("coldstart.build", start_time=T0)
    token = otel_context.attach(trace.set_span_in_context(ours))
    try:
        users = pair.sdk_provider.get_tracer("user").start_span("user.step")
    finally:
        otel_context.detach(token)
    assert users.parent.span_id == ours.get_span_context().span_id
    assert users.get_span_context().trace_id == ours.get_span_context().trace_id


def test_an_ended_span_waiting_for_export_is_few_objects_for_the_hosts_collector():
    """Ended spans wait in the export queue (up to SCHEDULE_DELAY_S, a whole start-up's worth
    in a burst), tracked by the host's garbage collector: each one it tracks brings the host's
    next full collection closer and lengthens it. A span with no events or links makes
    neither list; the unset status and the trace flags are shared (9 tracked objects a span
    before, 5 now: the span, its context, its attributes and two locks). Counted as what one
    span reaches and another does not, so that other threads' allocations meanwhile do not
    count."""
    import gc
    import types

    shared = (type, types.ModuleType, types.FunctionType, own_tracing.OwnTracerProvider, own_tracing.OwnScope,
              own_tracing.OwnResource, threading.Thread)

    def reached(start) -> list:
        seen, stack, found = set(), [start], []
        while stack:
            item = stack.pop()
            if id(item) in seen or isinstance(item, shared):
                continue
            seen.add(id(item))
            found.append(item)
            stack.extend(gc.get_referents(item))
        return found

    provider = own_tracing.OwnTracerProvider(own_tracing.OwnResource({}), Collecting())
    tracer = provider.get_tracer("scope")
    root = tracer.start_span("root")
    context = trace.set_span_in_context(root)
    one, other = [tracer.start_span("s", context=context, attributes={"a": 1, "b": "x", "c": 2.0})
                  for _ in range(2)]
    one.end()
    other.end()
    theirs = {id(item) for item in reached(other)}
    own = [item for item in reached(one) if id(item) not in theirs and gc.is_tracked(item)]
    # Python 3.10 gives an instance of a class without __slots__ (the API's BoundedAttributes)
    # a __dict__ object of its own; 3.11+ keeps those values inline: one tracked object more.
    assert len(own) <= (6 if sys.version_info >= (3, 11) else 7), sorted(type(item).__name__ for item in own)
    assert one.events == () and one.links == () and one.dropped_events == one.dropped_links == 0
    provider.shutdown()
