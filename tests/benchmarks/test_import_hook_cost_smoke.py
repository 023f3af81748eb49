"""benchmarks/import_hook_cost.py in smoke mode (one pair a measure): it runs end to end, both
sides of each pair really differ only by the import hook, and the hook's own time is counted
(never asserted as a speed: the figures are the coordinator's, taken in a quiet window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_import_hook_cost_runs_and_counts_the_hook(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "hook.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "import_hook_cost.py"), "--runs", "1",
                                "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| hook's own time in `import torch, transformers`" in completed.stdout
    doc = json.loads(out.read_text())
    assert doc["modules_after_package_import"] > 500  # torch and transformers were really imported
    # The timed side saw the hook called once per module loaded, and its time is a part of
    # the import's CPU time (the paired differences may be of either sign under load).
    assert doc["self"]["hook_calls"] > 500 and 0 < doc["self"]["share_of_cpu_median"] < 1
    # Issue 38's evidence is timed apart: a few calls per top-level import, inside the hook's time.
    assert doc["self"]["evidence_calls"] >= 4 and 0 < doc["self"]["evidence_s_median"] <= doc["self"]["hook_s_median"]
    for measure in ("package", "nested", "top_level"):
        for key in ("wall_s", "cpu_s"):
            assert doc[measure][key]["baseline_median"] > 0
    assert doc["nested"]["cpu_s"]["per_module_us"] == doc["nested"]["cpu_s"]["per_module_us"]  # a number
