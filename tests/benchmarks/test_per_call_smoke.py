"""benchmarks/per_call.py and the load + cast figure of benchmarks/startup.py in smoke mode:
they run end to end in fresh processes and give a number for every intercepted API and a
milliseconds-per-start-up row for each start-up they model. Speed is never asserted here
(figures are taken on purpose on a quiet machine: benchmarks/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
APIS = ("Tensor.to cast (bf16 -> fp16)", "Tensor.to no-op (returns self)", "Tensor.copy_ (host, same dtype)",
        "safe_open.get_tensor", "safetensors.torch.load_file, 1 tensor", "torch.load, 1 tensor")


def _run(*args, out) -> dict:
    completed = subprocess.run([sys.executable, *args, "--json", str(out)], capture_output=True, text=True,
                               timeout=600, cwd=BENCHMARKS)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(out.read_text()), completed.stdout


def test_per_call_gives_every_api_side_by_side_and_the_cost_per_start_up(tmp_path):
    result, stdout = _run(os.path.join(BENCHMARKS, "per_call.py"), "--smoke", out=tmp_path / "per_call.json")
    assert result["pairs"] == 1 and {"plain", "coldstart"} == set(result["rounds"][0])
    assert set(APIS) <= set(result["cases"])
    # pin_memory is measured where this build allows it, else said why not.
    assert "Tensor.pin_memory" in result["cases"] or "not allowed here" in result["skipped"]["Tensor.pin_memory"]
    for name in APIS:
        case = result["cases"][name]
        for state in ("unpatched", "active", "after_ready"):
            assert case["ns"][state]["median"] > 0, (name, state)
        assert case["added_ns"]["n"] == 1
    for name in ("Tensor.to cast (bf16 -> fp16)", "safe_open.get_tensor"):
        assert result["cases"][name]["target_ns"] >= 3000 and "target_met" in result["cases"][name]
    # The hooks were in place while measuring, and gone after ready().
    assert result["patches_removed_at_ready"] is True
    assert "to" in result["attributes_checked"] and "copy_" in result["attributes_checked"]
    assert result["attributes_still_original_while_active"] < len(result["attributes_checked"])
    rows = result["per_startup_ms"]
    assert any(s.startswith("70B") for s in rows) and any("piecewise" in s for s in rows)
    for row in rows.values():
        assert row["calls"] and isinstance(row["added_ms"], float)
    assert "| start-up | calls | added |" in stdout


def test_startup_gives_the_load_and_cast_ratio_without_ready(tmp_path):
    result, stdout = _run(os.path.join(BENCHMARKS, "startup.py"), "--smoke", "--sides", "coldstart", "--cache",
                          "warm", "--formats", "safetensors", "--cache-root", str(tmp_path / "cache"),
                          out=tmp_path / "startup.json")
    (block,) = result["blocks"]
    assert block["ratios"]["coldstart"]["work"]["median"] > 0
    for side in ("plain", "coldstart"):
        assert 0 < block["sides"][side]["work_s"]["median"] <= block["sides"][side]["region_s"]["median"]
    assert "coldstart/plain load+cast" in stdout
