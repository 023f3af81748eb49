"""benchmarks/inflight_bench.py in smoke mode: it runs end to end and every figure is a
number (speed is never asserted: it is measured by running the benchmark on purpose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_inflight_benchmark_smoke(tmp_path):
    out = tmp_path / "inflight.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "inflight_bench.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["hooks"]) == 2
    for case in result["hooks"].values():
        assert case["ns_per_span"]["median"] > 0
    for key in ("tick_nothing_due_us", "tick_with_record_us", "stall_capture_us", "gauge_scrape_us"):
        assert result["wakeups"][key]["median"] > 0
    assert 500 < result["wakeups"]["record_line_bytes"] < 8192  # a record is small and bounded
    for side in ("default", "stress"):
        assert result["end_to_end"][side]["region_ratio"]["median"] > 0
    assert "End to end" in done.stdout
