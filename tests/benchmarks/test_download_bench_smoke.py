"""benchmarks/download_overhead.py in smoke mode: it runs end to end against the test hub and
every figure is a number (speed is never asserted: it is measured by running the benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("huggingface_hub")
pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_download_benchmark_smoke(tmp_path):
    out = tmp_path / "download.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "download_overhead.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["links"]) == {"link", "loopback"}
    assert set(result["hooks"]) == {"cached", "head"} and result["hooks"]["head"]["plain_us"]["median"] > 0
    for figures in result["links"].values():
        assert figures["ratio"]["n"] == 2 and figures["ratio"]["median"] > 0
