"""The capture gate (patches/_guard.py) survives a fork and its own re-entry.

Every CUDA event call of the device timing is made under the gate's lock. A fork while
another thread is inside it used to copy the lock held into the child, where no thread would
ever release it: the child's first event call, or the reset a fork does, hung for ever
(issue 23, finding 2). Tested in fresh processes, with a thread parked inside the gate while
the main thread forks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from otel_coldstart.patches import _guard

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Thread A sits inside the gate (an "event call" that lasts until the main thread has forked);
# the main thread forks five times while A holds the lock. Each child uses the gate as the plugin would after a fork
# (reset, an event call, a capture begins and ends) and exits 0; a child that has not exited
# within 10 s is hung: it is killed and counted.
FORK_WHILE_HELD = textwrap.dedent("""
    import os, sys, threading, time
    if sys.argv[1] == "instrument":
        import otel_coldstart
        otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False)
    from otel_coldstart.patches import _guard

    rounds = [(threading.Event(), threading.Event()) for _ in range(5)]

    def hold():  # inside the gate until the main thread has forked, five times
        for inside, release in rounds:
            _guard.outside_captures(lambda: (inside.set(), release.wait(30)))

    threading.Thread(target=hold, daemon=True).start()
    results = []
    for inside, release in rounds:
        inside.wait(30)
        if _guard._count_lock.acquire(blocking=False):  # not held: the test would prove nothing
            _guard._count_lock.release()
            results.append("lock-not-held")
            release.set()
            continue
        pid = os.fork()
        if pid == 0:
            _guard.reset_captures()
            ran, value = _guard.outside_captures(lambda: 42)
            _guard.capture_started()
            refused = _guard.outside_captures(lambda: 0) == (False, None)
            _guard.capture_ended()
            os._exit(0 if (ran, value, refused) == (True, 42, True) else 3)
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                results.append("ok" if os.waitstatus_to_exitcode(status) == 0 else "failed")
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                results.append("hung")
                break
            time.sleep(0.01)
        release.set()
    print(" ".join(results))
""")


@pytest.mark.parametrize("mode", ["plain", "instrument"])
def test_children_forked_while_another_thread_holds_the_gate_do_not_hang(mode):
    """``instrument``: the controller's own at-fork handler also resets the gate (it may run
    before the gate's own handler); neither may hang."""
    env = dict(os.environ, PYTHONPATH=ROOT, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    done = subprocess.run([sys.executable, "-c", FORK_WHILE_HELD, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"] * 5, (done.stdout, done.stderr)


def _in_thread(call, timeout_s: float = 10):
    """Run ``call`` on a thread: a deadlock fails the test instead of hanging the suite."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", call()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "deadlocked on the gate's own lock"
    return result["value"]


def test_the_gate_can_be_re_entered_on_its_own_thread():
    """A call made under the gate that reaches the gate again (a signal handler settling
    aggregates, between two bytecodes of an event call) must not deadlock."""
    assert _in_thread(lambda: _guard.outside_captures(_guard.outside_captures, lambda: 7)) == (True, (True, 7))


def test_a_capture_started_inside_a_gated_call_is_seen_by_the_next_call():
    def begin_inside():
        _guard.capture_started()
        return _guard.outside_captures(lambda: "not while a capture is open")

    try:
        assert _in_thread(lambda: _guard.outside_captures(begin_inside)) == (True, (False, None))
        assert _guard.any_capture_open()
    finally:
        _guard.reset_captures()
    assert not _guard.any_capture_open()
