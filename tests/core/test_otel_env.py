"""OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER and OTEL_SDK_DISABLED are honoured as the
OpenTelemetry SDK reads them (opentelemetry/sdk/_configuration, the SDK providers), in fresh
processes as a user meets them: with ``none`` nothing is written to the working directory and
no summary is printed; ``console`` prints spans; ``otlp`` sends them; disabled means untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from _otlp_collector import TraceCollector
from otel_coldstart import _otel_env, export

SPREAD_OVER_WORKERS = True  # no shared fixture: `make test` spreads its tests over the workers

APP = textwrap.dedent("""
    import json, sys
    import otel_coldstart
    otel_coldstart.instrument(handle_sigterm=False)
    import torch
    original_to = torch.Tensor.to
    with otel_coldstart.phase("build_model"):
        x = torch.ones(8, dtype=torch.bfloat16).to(torch.float16)
    patched = torch.Tensor.to is not getattr(torch.Tensor.to, "__wrapped__", torch.Tensor.to)
    otel_coldstart.ready()
    sys.stderr.write("RESULT " + json.dumps({"trace_file": otel_coldstart.trace_file(),
                                             "patched": patched}) + "\\n")
""")


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra)
    return env


def _run_app(tmp_path, env: dict, argv_prefix=()) -> subprocess.CompletedProcess:
    app = tmp_path / "app.py"
    app.write_text(APP)
    result = subprocess.run([*argv_prefix, sys.executable, str(app)] if not argv_prefix else [*argv_prefix, str(app)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _result(completed) -> dict:
    (line,) = [ln for ln in completed.stderr.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


@pytest.mark.process
def test_unset_keeps_the_embedded_default_file_and_summary(tmp_path):
    completed = _run_app(tmp_path, _clean_env())
    assert _result(completed)["trace_file"].startswith(str(tmp_path / "otel-coldstart-traces"))
    assert "start-up breakdown" in completed.stderr


@pytest.mark.process
@pytest.mark.parametrize("value", ["none", "NONE", " none "])
def test_traces_exporter_none_writes_nothing_and_prints_nothing(tmp_path, value):
    completed = _run_app(tmp_path, _clean_env(OTEL_TRACES_EXPORTER=value))
    assert not (tmp_path / "otel-coldstart-traces").exists()
    assert "start-up breakdown" not in completed.stderr
    result = _result(completed)
    assert result["trace_file"] is None
    # Nothing reads the start-up (no traces, no metrics, no summary): the host is left alone.
    assert result["patched"] is False


@pytest.mark.process
def test_traces_exporter_none_with_a_summary_asked_for_still_prints_it(tmp_path):
    completed = _run_app(tmp_path, _clean_env(OTEL_TRACES_EXPORTER="none", OTEL_COLDSTART_SUMMARY="1"))
    assert not (tmp_path / "otel-coldstart-traces").exists()
    assert "start-up breakdown" in completed.stderr and _result(completed)["patched"] is True


@pytest.mark.process
def test_traces_exporter_console_prints_spans_and_writes_no_file(tmp_path):
    completed = _run_app(tmp_path, _clean_env(OTEL_TRACES_EXPORTER="console"))
    assert not (tmp_path / "otel-coldstart-traces").exists()
    assert "start-up breakdown" not in completed.stderr
    assert '"name": "model.startup"' in completed.stdout and '"name": "coldstart.build_model"' in completed.stdout


@pytest.mark.process
@pytest.mark.parametrize("value", ["true", "TRUE", " True "])
def test_sdk_disabled_leaves_the_process_alone(tmp_path, value):
    completed = _run_app(tmp_path, _clean_env(OTEL_SDK_DISABLED=value, OTEL_TRACES_EXPORTER="console"))
    assert not (tmp_path / "otel-coldstart-traces").exists()
    assert "model.startup" not in completed.stdout and "start-up breakdown" not in completed.stderr
    assert _result(completed) == {"trace_file": None, "patched": False}


@pytest.mark.process
@pytest.mark.parametrize("value", ["false", "1", "yes", ""])
def test_sdk_disabled_is_only_the_word_true(tmp_path, value):
    completed = _run_app(tmp_path, _clean_env(OTEL_SDK_DISABLED=value))
    assert _result(completed)["trace_file"] is not None and _result(completed)["patched"] is True


@pytest.mark.process
def test_an_unknown_exporter_name_is_a_warning_not_a_failure(tmp_path):
    completed = _run_app(tmp_path, _clean_env(OTEL_TRACES_EXPORTER="no_such_exporter"))
    assert "no_such_exporter" in completed.stderr and "no installed package provides" in completed.stderr
    assert not (tmp_path / "otel-coldstart-traces").exists()


@pytest.mark.process
def test_traces_exporter_list_sends_otlp_and_prints_console(tmp_path):
    receiver = TraceCollector(tmp_path / "collector.jsonl")
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
        completed = _run_app(tmp_path, _clean_env(OTEL_TRACES_EXPORTER="otlp,console",
                                                  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
                                                  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint))
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert {"model.startup", "coldstart.build_model"} <= set(receiver.span_names())
    assert '"name": "model.startup"' in completed.stdout
    assert not (tmp_path / "otel-coldstart-traces").exists()


@pytest.mark.process
def test_metrics_exporter_console_prints_the_start_up_metrics(tmp_path):
    completed = _run_app(tmp_path, _clean_env(OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="none"))
    assert "model.startup.duration" in completed.stdout and "model.startup.phase.duration" in completed.stdout
    assert not (tmp_path / "otel-coldstart-traces").exists()


@pytest.mark.process
def test_opentelemetry_instrument_without_a_distro_honours_none(tmp_path):
    """The issue's case: `opentelemetry-instrument python app.py` with no distro configuring
    the SDK (a distro name that matches none installed), OTEL_TRACES_EXPORTER=none."""
    instrument = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    app = tmp_path / "zero_code.py"
    app.write_text("import torch\nx = torch.ones(4, dtype=torch.bfloat16).to(torch.float16)\n")
    env = _clean_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
                     OTEL_PYTHON_DISTRO="no_distro", OTEL_PYTHON_CONFIGURATOR="no_configurator")
    completed = subprocess.run([instrument, sys.executable, str(app)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    assert not (tmp_path / "otel-coldstart-traces").exists()
    assert "start-up breakdown" not in completed.stderr
    # The same command with the variable unset is what used to happen: file and summary.
    env.pop("OTEL_TRACES_EXPORTER")
    completed = subprocess.run([instrument, sys.executable, str(app)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "otel-coldstart-traces").is_dir() and "start-up breakdown" in completed.stderr


# --- the rule itself, as the SDK's _configuration reads it ---------------------------------------

@pytest.mark.parametrize("value, protocol, expected", [
    (None, None, None), ("", None, None), ("  ", None, None),
    ("none", None, []), ("None", None, []), ("console,none", None, []),
    ("otlp", None, ["otlp_proto_grpc"]),  # the Python SDK's choice when no protocol is set
    ("otlp", "http/protobuf", ["otlp_proto_http"]), ("otlp", "grpc", ["otlp_proto_grpc"]),
    ("otlp", "http/json", []),  # the SDK refuses it; we leave that exporter out
    ("console, otlp_proto_http", None, ["console", "otlp_proto_http"]),
])
def test_exporter_names_follow_the_sdk(monkeypatch, value, protocol, expected):
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    if value is not None:
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
    if protocol is not None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    assert _otel_env.exporter_names("traces") == expected


def test_exporter_names_agree_with_the_sdks_own_parser(monkeypatch):
    """Where the SDK accepts a value, our reading is its reading (compared with the SDK's code)."""
    from opentelemetry.sdk._configuration import _get_exporter_names

    for value in ("otlp", "console", "otlp_proto_http,console", "none", "otlp,console"):
        for protocol in (None, "grpc", "http/protobuf"):
            monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
            if protocol:
                monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            else:
                monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
            assert _otel_env.exporter_names("traces") == _get_exporter_names("traces"), (value, protocol)


def test_named_otlp_without_protocol_makes_the_grpc_exporter(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    setup = export.configure_tracing(None, str(tmp_path))
    try:
        (exporter,) = setup.provider.sink.exporters()
        assert ".grpc." in type(exporter).__module__
        assert setup.file_path is None and setup.exports
    finally:
        setup.provider.shutdown()


@pytest.mark.parametrize("protocol, transport", [(None, ".grpc."), ("http/protobuf", ".http.")])
def test_named_otlp_metrics_need_no_endpoint_and_follow_the_protocol(monkeypatch, protocol, transport):
    from otel_coldstart import metrics as coldstart_metrics

    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    if protocol:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", protocol)
    setup = coldstart_metrics.configure_metrics(None)
    try:
        assert setup.owned
        (reader,) = setup.push_readers
        assert transport in type(reader._exporter).__module__
    finally:
        setup.close(1.0)


def test_metrics_exporter_unset_keeps_the_embedded_default(monkeypatch):
    from otel_coldstart import metrics as coldstart_metrics

    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_") or name == "OTEL_METRICS_EXPORTER":
            monkeypatch.delenv(name)
    assert not coldstart_metrics.configure_metrics(None).owned  # no endpoint: the global API
