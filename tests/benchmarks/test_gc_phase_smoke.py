"""benchmarks/gc_phase.py in smoke mode (tiny checkpoint, one run): it runs end to end, the
headroom it reports is the collector's (a ballast of empty lists shrinks it by about as many
objects), and every row has its figures (never asserted as a speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_gc_phase_runs_and_the_ballast_moves_the_headroom(tmp_path):
    out = tmp_path / "gc.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "gc_phase.py"), "--smoke", "--ballast", "3000",
                                "--cache-root", str(tmp_path / "ckpt"), "--json", str(out)],
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| variant | headroom |" in completed.stdout
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"plain", "coldstart", "plain + 3,000 objects"}
    for row in rows.values():
        assert row["headroom"] > 0 and len(row["work_s"]) == 1 and row["work_s"][0] > 0
    # 3,000 objects kept before torch's import leave less room before the next full collection
    # (or, if one ran during the import because of them, a fresh quarter of the heap).
    plain, ballast = rows["plain"]["headroom"], rows["plain + 3,000 objects"]["headroom"]
    assert ballast < plain or ballast > 20_000, (plain, ballast)
