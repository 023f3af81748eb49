"""The plugin's own import is recorded on the coldstart.import span (coldstart.import.own_s)
and kept out of the "import less at start-up" advice: measured in a fresh process, as a user
meets it, and read back by `otel-coldstart analyze`."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`


def test_own_import_share_is_on_the_import_span_and_out_of_the_saving(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    # Nothing but the plugin is imported before instrument(): the import phase is mostly ours.
    code = "import otel_coldstart; otel_coldstart.instrument(); otel_coldstart.ready()"
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    (trace_file,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))
    (span,) = [s for s in read_trace_file(trace_file) if s.name == "coldstart.import"]
    own = span.attributes[semconv.IMPORT_OWN_S]
    assert 0 < own * 1e9 <= span.duration_ns
    # The package, the OpenTelemetry SDK and instrument() take milliseconds at least.
    assert own > 0.005

    analyzed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", trace_file],
                              capture_output=True, text=True, timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr
    document = json.loads(analyzed.stdout)
    (dominant,) = [f for f in document["findings"] if f["rule"] == "dominant_phase"]
    assert dominant["phase"] == "import"  # interpreter start-up + our import: nothing else ran
    # No flat-half saving for a dominant phase (issue 13): the plugin's own import is in none.
    assert dominant["saving_s"] == 0 and dominant["saving_basis"].startswith("not estimated")
    assert any("otel-coldstart's own import" in line for line in dominant["evidence"])
