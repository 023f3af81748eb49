"""The first-use follow-up (otel_coldstart/first_use.py) on a real file whose pages come into
the page cache as it runs: the records say what was read after ready() and when, the
following ends at resident, at its bound or when the process ends, and the monitor thread of
the start-up is the one that runs it."""

from __future__ import annotations

import os
import threading
import time
import types

import pytest

from otel_coldstart import first_use, inflight, semconv
from storage_cases import read_whole, set_state

MiB = 1 << 20


class Lazy:
    """A patches._storage.LazyFile as the follow-up sees it, its records kept."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = os.path.getsize(path)
        self.identity = None
        self.unread = _out_of_the_cache(path)  # as ready() measures it: every page counted
        self.records: list[dict] = []

    def record(self, name: str, attrs: dict) -> None:
        assert name == semconv.SPAN_FIRST_USE
        self.records.append(dict(attrs))


def _out_of_the_cache(path: str) -> int:
    from otel_coldstart import probes

    size = os.path.getsize(path)
    pages = (size + 4095) // 4096
    fd = os.open(path, os.O_RDONLY)
    try:
        counts = probes.resident_pages_by_range(fd, ((0, pages),))
    finally:
        os.close(fd)
    return size if not counts else min(size, (pages - counts[0]) * 4096)


@pytest.fixture
def evicted(tmp_path):
    path = str(tmp_path / "weights.bin")
    with open(path, "wb") as handle:
        handle.write(os.urandom(24 * MiB))
    set_state(path, "evicted")
    return path


def read_range(path: str, start: int, length: int) -> None:
    with open(path, "rb") as handle:
        handle.seek(start)
        handle.read(length)


def wait_for(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_reads_after_ready_are_recorded_with_when_until_resident(evicted):
    lazy = Lazy(evicted)
    ready = time.time_ns()
    follow = first_use.FollowUp([lazy], ready, bound_s=60.0)
    thread = threading.Thread(target=follow.run, daemon=True)
    thread.start()
    wait_for(lambda: follow.samples >= 2)
    assert lazy.records == []  # nothing read: nothing to say yet
    touched = time.time_ns()
    read_range(evicted, 4 * MiB, 2 * MiB)
    wait_for(lambda: lazy.records)
    first = lazy.records[0]
    assert 2 * MiB <= first[semconv.FIRST_USE_BYTES] <= 24 * MiB, first  # the range, and readahead
    assert first[semconv.FIRST_USE_FIRST_S] >= (touched - ready) / 1e9 - 0.01
    assert semconv.FIRST_USE_END not in first and first[semconv.FIRST_USE_BOUND_S] == 60.0
    read_whole(evicted)
    # Read again while waiting: another test's eviction or memory pressure beside this one can
    # take pages back out before the follower samples (3.12's leg once waited 20 s for it).
    wait_for(lambda: follow.done.wait(0.5) or read_whole(evicted) or follow.done.is_set())
    last = lazy.records[-1]
    assert last[semconv.FIRST_USE_END] == semconv.FIRST_USE_END_RESIDENT
    # Every page out at ready() read since, and never more than that (issue 39).
    assert last[semconv.FIRST_USE_BYTES] == lazy.unread and last[semconv.FIRST_USE_UNREAD_BYTES] == 0
    thread.join(5)
    assert not thread.is_alive()
    # Its own cost: a sample every 0.25 s, a fraction of a millisecond each.
    elapsed_s = (time.time_ns() - ready) / 1e9
    assert follow.cpu_s < 0.05 * elapsed_s, (follow.cpu_s, elapsed_s, follow.samples)


def test_the_bound_ends_it_and_says_nothing_was_read(evicted):
    lazy = Lazy(evicted)
    follow = first_use.FollowUp([lazy], time.time_ns(), bound_s=0.6)
    follow.run()  # returns at the bound
    (record,) = lazy.records
    assert record[semconv.FIRST_USE_END] == semconv.FIRST_USE_END_BOUND and record[semconv.FIRST_USE_BYTES] == 0
    assert record[semconv.FIRST_USE_FOLLOWED_S] >= 0.6 and record[semconv.FIRST_USE_UNREAD_BYTES] > 20 * MiB


def test_the_process_ending_takes_a_last_sample(evicted):
    lazy = Lazy(evicted)
    calls = []
    follow = first_use.FollowUp([lazy], time.time_ns(), bound_s=60.0, on_read=calls.append)
    thread = threading.Thread(target=follow.run, daemon=True)
    thread.start()
    wait_for(lambda: follow.samples >= 1)
    read_range(evicted, 0, 8 * MiB)
    follow.end(semconv.END_SIGTERM)  # no wait for the next tick
    thread.join(5)
    last = lazy.records[-1]
    assert last[semconv.FIRST_USE_END] == semconv.END_SIGTERM and last[semconv.FIRST_USE_BYTES] >= 8 * MiB
    assert sum(calls) == last[semconv.FIRST_USE_BYTES]  # the metric got every byte once


def test_a_file_gone_is_dropped_without_a_record(tmp_path):
    path = str(tmp_path / "gone.bin")
    with open(path, "wb") as handle:
        handle.write(b"x" * MiB)
    lazy = Lazy(path)
    os.unlink(path)
    follow = first_use.FollowUp([lazy], time.time_ns(), bound_s=60.0)
    follow.run()
    assert follow.done.is_set() and lazy.records == []


def test_the_monitor_thread_takes_the_follow_up_else_a_thread_of_its_own(monkeypatch):
    board = inflight.ProgressBoard(types.SimpleNamespace(start_ns=time.time_ns()), progress_interval_s=0,
                                   stall_after_s=0.4)
    ran_on = []
    assert not board.continue_with(lambda: None)  # not started: nobody to take it
    board.start()
    assert board.continue_with(lambda: ran_on.append(threading.current_thread().name))
    board.stop()
    wait_for(lambda: ran_on)
    assert ran_on == ["otel-coldstart-inflight"]
    wait_for(lambda: not board._thread.is_alive())
    assert not board.continue_with(lambda: None)  # gone: the follow-up starts its own thread

    monkeypatch.setenv(first_use.ENV_BOUND_S, "0")
    assert first_use.start([object()], time.time_ns(), board) is None  # turned off
    monkeypatch.setenv(first_use.ENV_BOUND_S, "not a number")
    assert first_use.bound_from_env() == first_use.DEFAULT_BOUND_S
    assert first_use.start([], time.time_ns(), board) is None  # nothing to follow
