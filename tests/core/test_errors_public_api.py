"""A failure of ours inside the public context managers (``phase``, ``first_request``) is an
internal error: logged and kept for the suite, never the host's exception, and the host's own
exception still passes through unchanged. (The package face used to name a reporting
function it never defined: such a failure became a NameError in the host's ``with``.)"""

from __future__ import annotations

import pytest

import otel_coldstart
from otel_coldstart import _errors, first_token, session as _session


def _broken(*args, **kwargs):
    raise RuntimeError("injected bug in otel-coldstart")


@pytest.mark.internal_errors_expected
def test_a_phase_whose_span_cannot_start_runs_the_hosts_block(traced, monkeypatch):
    monkeypatch.setattr(_session.StartupSession, "start_container", _broken)
    ran = []
    with otel_coldstart.phase("download"):
        ran.append(True)
    with pytest.raises(KeyError, match="the host's own"):
        with otel_coldstart.phase("warmup"):
            raise KeyError("the host's own")
    assert ran == [True]
    assert _errors.INTERNAL_ERRORS == ["phase start: RuntimeError: injected bug in otel-coldstart"] * 2


@pytest.mark.internal_errors_expected
def test_a_first_request_that_cannot_begin_runs_the_hosts_request(traced, monkeypatch):
    monkeypatch.setattr(otel_coldstart, "_first_request_seen", False)
    monkeypatch.setattr(first_token, "begin", _broken)
    otel_coldstart.ready()
    with pytest.raises(ValueError, match="the host's own"):
        with otel_coldstart.first_request():
            raise ValueError("the host's own")
    assert _errors.INTERNAL_ERRORS == ["first request start: RuntimeError: injected bug in otel-coldstart"]
