"""The session owns every piece of per-start-up state: what is open is listed and cut short
(marked interrupted) by any end but ready(); a new start-up begins with none of the old
one's handles, captures or compilations."""

from __future__ import annotations

import threading

import torch
from opentelemetry import trace
from safetensors import safe_open

import otel_coldstart
from otel_coldstart import semconv, session as _session
from otel_coldstart.patches import cuda_graphs


def test_open_work_lists_what_runs_with_its_phase_and_thread(traced, small_checkpoint):
    session = _session.ACTIVE
    assert session.open_work() == [] and session.end_reason is None
    with otel_coldstart.phase("build"):
        with safe_open(small_checkpoint[0], framework="pt") as handle:
            handle.get_tensor(next(iter(handle.keys())))
            work = session.open_work()
            assert [(w.name, w.phase) for w in work] == [("coldstart.build", "build"),
                                                         ("coldstart.deserialize", "deserialize")]
            assert all(w.thread_id == threading.get_ident() and w.span_id for w in work)
            assert work[0].start_ns <= work[1].start_ns
            assert session.running_phase() == "deserialize"
    assert session.open_work() == []
    otel_coldstart.ready()
    assert session.end_reason == semconv.END_READY


def test_uninstrument_cuts_open_work_short_and_marks_it(traced, small_checkpoint):
    phase = otel_coldstart.phase("download")
    phase.__enter__()
    torch.ones(8).to(torch.float16)
    handle = safe_open(small_checkpoint[0], framework="pt").__enter__()
    handle.get_tensor(next(iter(handle.keys())))
    otel_coldstart.uninstrument()
    spans = traced.spans()
    (root,) = [s for s in spans if s.name == semconv.SPAN_ROOT]
    assert root.attributes[semconv.END_REASON] == semconv.END_UNINSTRUMENTED
    assert root.attributes[semconv.END_PHASE] == "deserialize"
    (download,) = [s for s in spans if s.name == "coldstart.download"]
    (shard,) = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_DESERIALIZE]
    (cast,) = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_CAST]
    for span in (download, shard, cast):
        assert span.attributes[semconv.INTERRUPTED] is True, span.name
        assert span.end_time <= root.end_time
    assert cast.parent.span_id == download.context.span_id
    assert shard.attributes[semconv.FILE_PATH] == small_checkpoint[0]
    # The host's own exits later do nothing more (ended once) and raise nothing.
    handle.__exit__(None, None, None)
    phase.__exit__(None, None, None)
    assert len([s for s in traced.spans() if s.name == "coldstart.download"]) == 1
    # Cutting spans short never detached contexts out of order: nothing is left current.
    assert not trace.get_current_span().get_span_context().is_valid


def test_ready_leaves_open_work_to_end_when_it_ends(traced):
    with otel_coldstart.phase("warmup"):
        otel_coldstart.ready()
    (warmup,) = [s for s in traced.spans() if s.name == "coldstart.warmup"]
    assert semconv.INTERRUPTED not in warmup.attributes


def test_a_new_startup_has_none_of_the_old_ones_state(traced, small_checkpoint):
    old = _session.ACTIVE
    handle = safe_open(small_checkpoint[0], framework="pt").__enter__()
    handle.get_tensor(next(iter(handle.keys())))
    capture = cuda_graphs._open_capture(object(), cuda_graphs.API_CUDA_GRAPH, "begin")
    from otel_coldstart.patches import _guard

    assert capture is not None and _guard.any_capture_open()
    assert torch.ones(4).to(torch.float16) is not None  # inside a capture: not recorded
    traced.reinstrument()
    new = _session.ACTIVE
    assert new is not old
    assert new.open_work() == [] and not _guard.any_capture_open()
    # The old capture's "running here" flag is gone with its session: casts record again.
    torch.ones(4).to(torch.float16)
    handle.__exit__(None, None, None)  # the old start-up's handle: nothing for the new one
    otel_coldstart.ready()
    new_spans = new.records()  # what this start-up wrote (as its trace file would hold)
    assert not [s for s in new_spans if s.phase in (semconv.PHASE_DESERIALIZE, semconv.PHASE_GRAPH_CAPTURE)]
    assert [s for s in new_spans if s.phase == semconv.PHASE_CAST]
    # The old start-up was cut short by reinstrument (uninstrument): its open handle and
    # capture are in its own records, marked interrupted.
    old_spans = old.records()
    (old_capture,) = [s for s in old_spans if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    (old_shard,) = [s for s in old_spans if s.phase == semconv.PHASE_DESERIALIZE]
    assert old_capture.attributes[semconv.INTERRUPTED] is True
    assert old_shard.attributes[semconv.INTERRUPTED] is True
    new_ids = {s.span_id for s in new_spans}
    assert not new_ids & {s.span_id for s in old_spans}
    # Each exported once (progress records, written from instrument() on, are not work).
    exported = [s for s in traced.spans() if s.name != semconv.SPAN_PROGRESS]
    assert len(exported) == len(new_spans) + len(old_spans)
    assert not trace.get_current_span().get_span_context().is_valid
