"""benchmarks/many_files.py in smoke mode (20 files, one pair): it runs end to end in fresh
processes and reports, per API, the time added per file and the instrumented start-up's own
cost beside it. Speed is never asserted here (figures go in benchmarks/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_many_files_reports_the_added_time_and_the_own_cost_per_api(tmp_path):
    out = tmp_path / "many_files.json"
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "many_files.py"), "--smoke",
                           "--cache-root", str(tmp_path / "cache"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=BENCHMARKS)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["files"] == 20 and [c["api"] for c in result["cases"]] == ["load_file", "safe_open"]
    for case in result["cases"]:
        (pair,) = case["pairs"]
        assert pair["plain_s"] > 0 and pair["coldstart_s"] > 0
        own = pair["own_cost"]
        assert own["coldstart.own_cost_s"] > 0 and own["coldstart.own_cost.phase.deserialize_s"] > 0
    assert "| load_file | 1 |" in done.stdout
