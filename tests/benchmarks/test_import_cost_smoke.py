"""benchmarks/import_cost.py in smoke mode (one run): it works end to end and its figures are
numbers, and the plugin's own recorded import share agrees with the wall time measured around
it from outside (never asserted as a speed)."""

from __future__ import annotations

import json
import os
import shutil
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


def test_checkouts_compared_side_by_side_each_import_their_own_code(tmp_path):
    """--against: each checkout's child imports that checkout's package (it says which file it
    imported, and a child that took another's fails the run), both with and without torch first."""
    repository = os.path.dirname(os.path.realpath(BENCHMARKS))
    other = tmp_path / "other"  # a second checkout: a copy of this one's package
    shutil.copytree(os.path.join(repository, "otel_coldstart"), other / "otel_coldstart",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "against.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "import_cost.py"), "--runs", "1",
                                "--against", str(other), "--json", str(out)],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    document = json.loads(out.read_text())
    rows = {(os.path.realpath(r["checkout"]), r["torch_first"]): r for r in document["results"]}
    assert set(rows) == {(os.path.realpath(path), first) for path in (repository, str(other))
                         for first in (True, False)}
    for (checkout, _), row in rows.items():
        (run,) = row["runs"]
        assert os.path.realpath(run["file"]).startswith(checkout + os.sep), (checkout, run["file"])
        assert run["import_cpu_s"] > 0 and run["ready_cpu_s"] >= 0
    assert completed.stdout.count("| yes |") == 2 and completed.stdout.count("| no |") == 2
    missing = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "import_cost.py"), "--runs", "1",
                              "--against", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "not a checkout of otel-coldstart" in missing.stderr
