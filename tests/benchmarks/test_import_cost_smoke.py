"""benchmarks/import_cost.py in smoke mode (one run): it works end to end and its figures are
numbers, and the plugin's own recorded import share agrees with the wall time measured around
it from outside (never asserted as a speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_import_cost_runs_and_its_figures_agree(tmp_path):
    out = tmp_path / "import.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "import_cost.py"), "--runs", "1",
                                "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert "| import + instrument() (wall) |" in completed.stdout
    document = json.loads(out.read_text())
    (run,) = document["runs"]
    assert run["import_s"] > 0 and run["instrument_s"] > 0
    # own_s = the package's import (timed inside it) + instrument() up to the import span's end:
    # within the outside measurement of the same two steps (plus a little of the session set-up).
    outside = run["import_s"] + run["instrument_s"]
    assert 0.5 * outside <= run["own_s"] <= outside + 0.005
    (importtime,) = document["importtime"]
    assert importtime["otel_coldstart"] > 0
