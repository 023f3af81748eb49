"""The benchmarks in smoke mode: tiny checkpoints, one pair. They must run end to end and
produce numbers; speed is never asserted here (it is measured only by running benchmarks/
on purpose, see benchmarks/README.md).

What is asserted is what does not depend on speed: every figure is a positive number, span
counts do not depend on the tensor count, and after ready() the patched attributes are
torch's original objects again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]  # fresh Python processes: not in `make test-fast`

PER_CALL_APIS = ("Tensor.to cast (bf16 -> fp16)", "Tensor.to no-op (returns self)", "Tensor.copy_ (host, same dtype)",
                 "safe_open.get_tensor", "safetensors.torch.load_file, 1 tensor", "torch.load, 1 tensor")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    cache = tmp_path_factory.mktemp("bench-cache")
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    completed = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "run_all.py"), "--smoke", "--out", str(out),
         "--cache-root", str(cache)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return out, completed


def _load(out, name):
    with open(os.path.join(out, f"{name}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def _positive(summary: dict) -> bool:
    return summary["n"] > 0 and all(summary[k] > 0 for k in ("median", "min", "max"))


def test_report_is_written_with_every_section(smoke_run):
    out, completed = smoke_run
    with open(os.path.join(out, "report.md"), encoding="utf-8") as handle:
        report = handle.read()
    for title in ("Start-up overhead", "Per-call cost", "Span volume", "Storage floor"):
        assert f"## {title}" in report
    assert '"torch": ' in report and "load average" in report
    assert "n/a" not in report.split("## Start-up overhead")[1].split("## Per-call")[0]


def test_startup_gives_paired_ratios_for_every_format_and_cache_state(smoke_run):
    result = _load(smoke_run[0], "startup")
    cells = {(b["format"], b["cache"]) for b in result["blocks"]}
    assert cells == {("safetensors", "warm"), ("safetensors", "cold"), ("bin", "warm"), ("bin", "cold")}
    for block in result["blocks"]:
        for side in ("coldstart", "profiler"):
            assert _positive(block["ratios"][side]["process"])
            assert _positive(block["ratios"][side]["region"])
            assert block["rss_added_mib"][side]["n"] == block["pairs"]
        assert _positive(block["ratios"]["profiler"]["region_with_first_profile"])
        assert _positive(block["ratios"]["coldstart"]["work"])  # the load + cast alone, without ready()
        for side in ("plain", "coldstart"):
            assert 0 < block["sides"][side]["work_s"]["median"] <= block["sides"][side]["region_s"]["median"]
        for runs in block["rounds"]:
            # Every side did the same work: all parameters cast to fp16.
            assert len({run["cast_elements"] for run in runs.values()}) == 1
            assert runs["plain"]["cast_elements"] > 0


def test_per_call_measures_three_states_and_patches_are_gone_after_ready(smoke_run):
    result = _load(smoke_run[0], "per_call")
    assert result["patches_removed_at_ready"] is True
    assert "to" in result["attributes_checked"] and "copy_" in result["attributes_checked"]
    # While active the hooks are really in place (not measuring an unpatched torch by mistake).
    assert result["attributes_still_original_while_active"] < len(result["attributes_checked"])
    for case in result["cases"].values():
        for state in ("unpatched", "active", "after_ready"):
            assert _positive(case["ns"][state])
        assert case["added_ns"]["n"] == result["pairs"]
    assert set(PER_CALL_APIS) <= set(result["cases"])
    # pin_memory is measured where this build allows it, else said why not.
    assert "Tensor.pin_memory" in result["cases"] or "not allowed here" in result["skipped"]["Tensor.pin_memory"]
    for name in ("Tensor.to cast (bf16 -> fp16)", "safe_open.get_tensor"):
        assert result["cases"][name]["target_ns"] >= 3000 and "target_met" in result["cases"][name]
    # What that adds to a start-up, for each one modelled (a 70B load, vLLM's graph captures).
    rows = result["per_startup_ms"]
    assert any(s.startswith("70B") for s in rows) and any("piecewise" in s for s in rows)
    for row in rows.values():
        assert row["calls"] and isinstance(row["added_ms"], float)
    report = (smoke_run[0] / "report.md").read_text(encoding="utf-8")
    assert "| start-up | calls | added |" in report and "coldstart/plain load+cast" in report


def test_span_count_does_not_grow_with_tensors(smoke_run):
    result = _load(smoke_run[0], "span_volume")
    by_format: dict[str, dict[int, int]] = {}
    for row in result["rows"]:
        assert row["spans"] > 0 and row["by_name"].get("model.startup") == 1
        by_format.setdefault(row["format"], {})[row["tensors"]] = row["spans"]
    for fmt, counts in by_format.items():
        assert len(counts) == 2, counts
        assert len(set(counts.values())) == 1, f"{fmt}: span count changed with tensor count: {counts}"


def test_floor_reports_rates_for_both_states(smoke_run):
    result = _load(smoke_run[0], "floor")
    assert {row["format"] for row in result["rows"]} == {"safetensors", "bin"}
    for row in result["rows"]:
        assert row["floor"]["format"] == "otel-coldstart.floor"
        for state in ("cold", "warm"):
            assert _positive(row["floor_bytes_per_s"][state])
            assert _positive(row["loader_bytes_per_s"][state]["region_s"])
