"""benchmarks/analyzer_scale.py in smoke mode: it runs end to end and reports positive
figures. Speed is not asserted (benchmarks/RESULTS-analyzer.md holds the measured numbers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_smoke_mode_reports_time_and_memory(tmp_path):
    out = tmp_path / "scale.json"
    keep = tmp_path / "traces"
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "analyzer_scale.py"), "--smoke", "--out", str(out),
         "--keep", str(keep)], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    results = json.loads(out.read_text())
    assert [r["spans"] for r in results["runs"]] == [300, 3000]
    for run in results["runs"]:
        assert run["wall_s"] > 0 and run["peak_rss_bytes"] > 0 and run["file_bytes"] > 0
    # the generated trace is a real start-up the analyzer reads: every span, one root
    from otel_coldstart.analyze.breakdown import breakdowns
    from otel_coldstart.analyze.readers import read_trace

    result = read_trace(str(keep / "trace-3000.otlp.jsonl"))
    assert result.format == "otlp-lines" and len(result.spans) == 3000
    [startup] = breakdowns(result.spans)
    assert startup.parallelism < 1.0001
    assert sum(p.busy_ns for p in startup.phases) + startup.unattributed_ns == startup.duration_ns
