"""Whether the process is ending on an uncaught KeyboardInterrupt (ending._KeyboardInterruptFlag):
CPython's flag, or, where a thread cleared it before our exit handler ran, the exception the
top level printed (exactly KeyboardInterrupt, outside the REPL)."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from otel_coldstart.ending import _KeyboardInterruptFlag


class _Interrupted(KeyboardInterrupt):
    pass


def at_top_level(error: BaseException) -> BaseException:
    """``error`` as the interpreter prints one that ended the program: its traceback begins at
    an outermost frame, one nothing called (here a thread's first frame: every frame of this
    test's own thread has a caller)."""
    outermost = []

    def climb():
        frame = sys._getframe()
        while frame.f_back is not None:
            frame = frame.f_back
        outermost.append(frame)

    thread = threading.Thread(target=climb)
    thread.start()
    thread.join()
    (frame,) = outermost
    return error.with_traceback(types.TracebackType(None, frame, 0, frame.f_lineno))


@pytest.fixture
def printed(monkeypatch):
    def set_printed(error):
        for name in ("last_exc", "last_value"):
            monkeypatch.setattr(sys, name, error, raising=False)
    monkeypatch.delattr(sys, "ps1", raising=False)
    return set_printed


def test_a_printed_keyboard_interrupt_counts_when_the_flag_was_cleared(printed):
    assert _KeyboardInterruptFlag._variable() is None or not _KeyboardInterruptFlag._variable().value
    printed(at_top_level(KeyboardInterrupt()))
    assert _KeyboardInterruptFlag.read() is True
    printed(KeyboardInterrupt())  # printed from C while the program went on: no traceback
    assert _KeyboardInterruptFlag.read() is not True


def test_other_errors_a_subclass_and_the_repl_do_not(printed, monkeypatch):
    flag_readable = _KeyboardInterruptFlag._variable() is not None
    for error in (at_top_level(RuntimeError("x")), at_top_level(_Interrupted()), None):
        printed(error)
        assert _KeyboardInterruptFlag.read() is (False if flag_readable else None)
    printed(at_top_level(KeyboardInterrupt()))
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert _KeyboardInterruptFlag.read() is (False if flag_readable else None)
