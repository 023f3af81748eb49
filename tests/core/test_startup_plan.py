"""The one ending of a start-up: the plan Startup.finish decides before doing anything, for
every reason, and that a fork or uninstrument() drops one object."""

from __future__ import annotations

import os

import pytest

import otel_coldstart
from otel_coldstart import semconv, session as _session
from otel_coldstart.controller import CONTROLLER
from otel_coldstart.plan import plan
from otel_coldstart.startup import Startup

BASE = dict(summary=True, metrics=False, metrics_later=False, file_mode=True, remote=False, deadline_s=5.0)


def test_ready_writes_the_file_before_returning_and_leaves_the_summary_to_a_thread_of_ours():
    decided = plan(semconv.END_READY, ended=False, **BASE)
    assert decided.end and decided.ready and decided.wait_for_file
    assert not decided.drain and not decided.summary and decided.later == ("summary",)


def test_ready_records_metrics_a_reader_may_collect_at_once_and_then_prints_inline():
    decided = plan(semconv.END_READY, ended=False, **{**BASE, "metrics": True})
    assert decided.record_metrics and decided.summary and decided.later == ()


def test_ready_leaves_metrics_only_we_push_to_a_thread_of_ours():
    decided = plan(semconv.END_READY, ended=False, **{**BASE, "summary": False, "metrics_later": True})
    assert not decided.record_metrics and decided.later == ("metrics",) and not decided.make_metrics


@pytest.mark.parametrize("reason", [semconv.END_EXIT, semconv.END_EXCEPTION, semconv.END_SIGTERM])
def test_an_exit_does_everything_now_within_one_deadline(reason):
    decided = plan(reason, ended=False, **{**BASE, "metrics_later": True, "remote": True, "file_mode": False})
    assert decided.end and not decided.ready
    assert decided.make_metrics and decided.record_metrics and decided.summary and decided.later == ()
    assert decided.drain and decided.fallback and decided.deadline_s == 5.0


def test_the_exit_after_ready_only_drains():
    decided = plan(semconv.END_EXIT, ended=True, **BASE)
    assert not decided.end and decided.drain and not decided.summary and not decided.record_metrics


def test_uninstrument_drains_and_leaves_the_host_its_provider():
    decided = plan(semconv.END_UNINSTRUMENTED, ended=False, **{**BASE, "remote": True, "file_mode": False})
    assert decided.end and decided.drain and not decided.fallback and not decided.ready


def test_every_piece_of_per_start_up_state_is_on_one_object(traced):
    startup = CONTROLLER.startup
    assert isinstance(startup, Startup)
    session = _session.ACTIVE
    assert session is startup.session and session.startup is startup
    assert startup.storage is not None and startup.progress is session.progress
    # The patches' per-start-up state is the session's, made on first use (patches/__init__.py).
    from otel_coldstart.patches import _device_windows, tensor_ops

    assert _device_windows.windows() is session.state(_device_windows.__name__, dict) == {}
    assert tensor_ops._cuda_up() is False
    otel_coldstart.ready()
    assert [p.reason for p in startup.plans] == [semconv.END_READY]
    otel_coldstart.uninstrument()
    assert CONTROLLER.startup is None and _session.ACTIVE is None
    assert [p.reason for p in startup.plans] == [semconv.END_READY, semconv.END_UNINSTRUMENTED]
    assert not startup.plans[-1].end  # ended at ready(): uninstrument() only drains


def test_finish_twice_ends_once(traced):
    startup = CONTROLLER.startup
    startup.finish(semconv.END_READY)
    roots = traced.named(semconv.SPAN_ROOT)
    startup.finish(semconv.END_READY)
    assert traced.named(semconv.SPAN_ROOT) == roots and len(roots) == 1


@pytest.mark.process  # forks: not in `make test-fast` (the plan tests above are)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_drops_the_startup_it_inherited(traced):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's exit
        try:
            gone = CONTROLLER.startup is None and _session.ACTIVE is None
            os.write(write_fd, b"1" if gone else b"0")
        finally:
            os._exit(0)
    os.close(write_fd)
    answer = os.read(read_fd, 1)
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert CONTROLLER.startup is not None  # the parent keeps its own
