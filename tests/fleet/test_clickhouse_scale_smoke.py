"""benchmarks/clickhouse_scale.py runs (200 start-ups): the script the RESULTS.md figures come from."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("chdb")
pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_benchmark_writes_its_table_and_times_capacity(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "clickhouse_scale.py"), "--startups", "200",
                           "--runs", "1", "--keep", str(tmp_path / "db")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (run,) = result["runs"]
    assert result["spans"] == 10_000 and run["rc"] == "0"
    assert float(run["wall_s"]) > 0 and float(run["heap_peak_mb"]) > 0
