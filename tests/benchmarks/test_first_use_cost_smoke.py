"""benchmarks/first_use_cost.py with small counts: it runs end to end, every state gives a
row for 1 and N files, and the files were in the state each row names (speed is never
asserted: it is measured by running the benchmark on purpose, in a quiet window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts a fresh Python process: not in `make test-fast`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmarks", "first_use_cost.py")


def test_first_use_cost_smoke(tmp_path):
    out = tmp_path / "first_use.json"
    done = subprocess.run([sys.executable, SCRIPT, "--mib", "16", "--files", "3", "--passes", "5",
                           "--dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["state"], r["files"]) for r in rows] == [(s, n) for s in ("evicted", "tail", "sparse") for n in (1, 3)]
    for row in rows:
        assert row["pass_ms"] >= 0 and row["tick_s"] >= 0.25, row
    ratios = {r["state"]: r["resident_ratio"] for r in rows if r["resident_ratio"] is not None}
    if ratios and ratios["evicted"] < 0.5:  # None where the kernel cannot say; kept pages on tmpfs
        assert ratios["evicted"] < 0.2 and 0.3 < ratios["tail"] < 0.95 and 0.3 < ratios["sparse"] < 0.95, ratios
    assert "tick at 1% of a core" in done.stdout


def test_a_missing_directory_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--dir", str(tmp_path / "absent")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "not a directory" in done.stderr and "Traceback" not in done.stderr
