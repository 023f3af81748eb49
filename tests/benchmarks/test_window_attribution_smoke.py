"""benchmarks/window_attribution.py in smoke mode (tiny checkpoint, one pair): it runs end to
end, and each side's window is split by thread and collector from the child's own counters
(never asserted as a speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_window_attribution_splits_each_window_by_thread_and_collector(tmp_path):
    out = tmp_path / "attribution.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "window_attribution.py"), "--smoke",
                                "--cache-root", str(tmp_path / "ckpt"), "--json", str(out)],
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| component | plain ms | coldstart ms |" in completed.stdout
    result = json.loads(out.read_text())
    for side in ("plain", "coldstart"):
        (run,) = result["runs"][side]
        threads = run["threads_cpu_s"]
        assert threads is not None, "no /proc/self/task/*/schedstat on this kernel"
        # The window is the main thread's work: it spent CPU there, and no group is negative.
        assert threads["main"] > 0 and min(threads.values()) >= 0, threads
        assert len(run["gc_young_in_work"]) == 2 and run["gc_young_s"] >= 0
    components = {row["component"] for row in result["summary"]}
    assert {"work_s", "main", "other_python", "gc_young_s", "gc_full_s"} <= components
