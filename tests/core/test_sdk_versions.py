"""The OpenTelemetry versions we support (issue 22.5): every private name own_tracing.py and
export.py lean on exists in the installed API/SDK, and the own provider is used exactly where
it mirrors the SDK. CI runs this on the pinned SDK and on the oldest one pyproject allows
(.ci/run), so a new SDK that moves a name, or an old one we no longer mirror, fails here."""

from __future__ import annotations

import importlib

import pytest

from otel_coldstart import export, own_tracing


def _sdk() -> tuple[int, int]:
    return tuple(int(p) for p in own_tracing.sdk_version().split(".")[:2])


@pytest.mark.parametrize("module,owner,name", own_tracing.PRIVATE_NAMES)
def test_every_private_name_is_there_where_the_own_provider_is_used(module, owner, name):
    if _sdk() < own_tracing.OWN_PROVIDER_MIN_SDK:
        pytest.skip(f"SDK {own_tracing.sdk_version()}: the SDK's own provider is used, these names are not")
    target = importlib.import_module(module)
    if owner is not None:
        target = getattr(target, owner)
        if name == "_attributes":  # an instance attribute of Link
            from opentelemetry.trace import SpanContext

            target = target(SpanContext(1, 1, False))
        elif name == "_immutable":
            target = target(immutable=False)
    assert hasattr(target, name), f"{module}.{owner or ''}.{name} moved: own_tracing must follow the SDK"


def test_the_own_provider_is_used_exactly_where_it_mirrors_the_sdk(tmp_path, monkeypatch):
    monkeypatch.setattr(own_tracing, "_usable", None)
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    setup = export.configure_tracing(None, str(tmp_path))
    expected = _sdk() >= own_tracing.OWN_PROVIDER_MIN_SDK
    assert isinstance(setup.provider, own_tracing.OwnTracerProvider) is expected
    assert setup.file_path is not None  # the embedded default's file either way


ROUND_TRIP = r"""
import time
import otel_coldstart
otel_coldstart.instrument(summary=True)
with otel_coldstart.phase("download"):
    time.sleep(0.05)
with otel_coldstart.phase("warmup"):
    pass
otel_coldstart.ready()
print(otel_coldstart.trace_file())
"""


@pytest.mark.process
def test_a_start_up_round_trips_through_the_installed_sdk(tmp_path):
    """Whatever provider the installed SDK gets (ours, or the SDK's own below the mirrored
    versions): a start-up is written, summarised, and read back by analyze."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[otel-coldstart] start-up breakdown" in done.stderr
    path = done.stdout.strip().splitlines()[-1]
    analyzed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", path],
                              capture_output=True, text=True, timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr
    import json

    (startup,) = json.loads(analyzed.stdout)["startups"]
    assert startup["ready"] is True
    assert {p["phase"] for p in startup["phases"]} >= {"download", "warmup"}
