"""benchmarks/eta_bench.py in smoke mode: it runs end to end and every figure is a number
(accuracy and speed are never asserted here: tests/core/test_time_to_ready_process.py checks
the accuracy; the figures for the record come from running the benchmark on purpose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_eta_benchmark_smoke(tmp_path):
    out = tmp_path / "eta.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "eta_bench.py"), "--smoke",
                           "--checkpoint-dir", str(tmp_path / "ckpt"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    (run,) = result["accuracy"]["runs"]
    for share in ("0.25", "0.5", "0.75"):
        point = run["points"][share]
        assert point["estimate_s"] >= 0 and point["truth_s"] > 0 and point["history"] == 1
    assert result["reading"]["real"]["startups"] == 2 and result["reading"]["estimate_us"] > 0
    assert result["reading"]["worst_case"]["startups"] == 0  # lines that parse, but no start-up
    assert result["host"]["instrument_ratio"]["median"] > 0 and result["host"]["work_ratio"]["median"] > 0
    assert "### Accuracy" in done.stdout
