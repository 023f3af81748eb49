"""benchmarks/own_cost_share.py in smoke mode (the few-MiB checkpoint, one pair): it runs end to
end in fresh processes and puts, beside the instrumented start-ups' reported own cost and share
(instrument() first, and after import torch), the process CPU the instrumented side spent more
than the plain one. Speed is never asserted
here (figures go in benchmarks/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_own_cost_share_reports_the_share_and_the_measured_difference(tmp_path):
    out = tmp_path / "own_cost_share.json"
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "own_cost_share.py"), "--smoke",
                           "--cache-root", str(tmp_path / "cache"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=BENCHMARKS)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    (pair,) = result["pairs"]
    assert 0 < pair["own_cost_s"] < pair["startup_s"] and pair["share"] == pair["own_cost_s"] / pair["startup_s"]
    assert pair["setup_s"] > 0 and isinstance(pair["added_cpu_at_import_s"], float)
    assert pair["added_cpu_at_work_end_s"] != pair["added_cpu_at_import_s"]  # the load + cast came between
    # The third side, instrument() after import torch: its own report, and its added CPU beside it.
    late = pair["late"]
    assert 0 < late["own_cost_s"] < late["startup_s"] and late["share"] == late["own_cost_s"] / late["startup_s"]
    assert late["setup_s"] > 0 and isinstance(late["added_cpu_at_work_end_s"], float)
    assert result["late"]["median_own_cost_s"] == late["own_cost_s"]
    assert "| median |" in done.stdout and "mean ± standard error" in done.stdout
