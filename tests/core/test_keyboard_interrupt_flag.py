"""Whether the process is ending on an uncaught KeyboardInterrupt (ending._KeyboardInterruptFlag):
CPython's flag, or, where a thread cleared it before our exit handler ran, the exception the
top level printed (exactly KeyboardInterrupt, outside the REPL)."""

from __future__ import annotations

import sys

import pytest

from otel_coldstart.ending import _KeyboardInterruptFlag


class _Interrupted(KeyboardInterrupt):
    pass


@pytest.fixture
def printed(monkeypatch):
    def set_printed(error):
        for name in ("last_exc", "last_value"):
            monkeypatch.setattr(sys, name, error, raising=False)
    monkeypatch.delattr(sys, "ps1", raising=False)
    return set_printed


def test_a_printed_keyboard_interrupt_counts_when_the_flag_was_cleared(printed):
    assert _KeyboardInterruptFlag._variable() is None or not _KeyboardInterruptFlag._variable().value
    printed(KeyboardInterrupt())
    assert _KeyboardInterruptFlag.read() is True


def test_other_errors_a_subclass_and_the_repl_do_not(printed, monkeypatch):
    flag_readable = _KeyboardInterruptFlag._variable() is not None
    for error in (RuntimeError("x"), _Interrupted(), None):
        printed(error)
        assert _KeyboardInterruptFlag.read() is (False if flag_readable else None)
    printed(KeyboardInterrupt())
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert _KeyboardInterruptFlag.read() is (False if flag_readable else None)
