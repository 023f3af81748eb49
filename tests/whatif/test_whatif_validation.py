"""Projections checked against the start-ups they predict (issue 27, item 2): for each lever,
5 fresh-process start-ups a side, interleaved, the baseline projected with
``otel-coldstart whatif`` and the counterfactual measured; the projected total p50 must be
within 15% of the measured one (benchmarks/whatif_validation.py runs the same cases and
records the figures in benchmarks/RESULTS.md).

Each case is sized so that the lever moves the start-up by more than the tolerance (asserted:
a projection that saved nothing would fail). A busy machine can still move a p50 of 5 by 15%
on its own, so a miss is measured once more and only a second miss fails: a projection that
is wrong misses every time.
"""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.process, pytest.mark.timing]  # measured against measured: alone, after the rest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

import whatif_validation as validation  # noqa: E402

RUNS = 5


def _describe(result) -> str:
    return (f"{result.line()}\n  baseline  {[round(x, 2) for x in result.baseline_s]}\n  projected "
            f"{[round(x, 2) for x in result.projected_s]}\n  measured  {[round(x, 2) for x in result.measured_s]}\n"
            f"  assumptions: {result.assumptions}\n  load {result.load_before} -> {result.load_after}")


def _validate(case: str) -> None:
    attempts = []
    for _ in range(2):
        result = validation.run_case(case, RUNS)
        if result.skipped:
            pytest.skip(result.skipped)
        attempts.append(result)
        assert result.projected_p50_s is not None, f"not estimated: {result.not_estimated}"
        # The check can fail only where the lever moved the start-up by more than the tolerance:
        # an attempt whose measured effect is inside the noise band proves nothing either way and
        # is run once more (seen once: serving-dtype's 649 MB cast moved a quiet run by 13%, the
        # next run by over 15%); two such attempts fail.
        effect = result.baseline_p50_s / result.measured_p50_s - 1
        if effect > validation.TOLERANCE and result.passed:
            return
    pytest.fail(f"{case}: twice either the lever's effect within the {validation.TOLERANCE:.0%} noise band or the "
                f"projected p50 outside {validation.TOLERANCE:.0%} of the measured p50\n"
                + "\n".join(_describe(r) for r in attempts))


def test_prewarm_projection_of_evicted_startups_matches_resident_ones():
    _validate("prewarm")


def test_serving_dtype_projection_of_a_cast_bf16_checkpoint_matches_an_fp16_one():
    _validate("serving-dtype")


def test_compile_cache_projection_of_an_empty_inductor_cache_matches_a_warm_one():
    _validate("compile-cache")  # reads the cache provenance patches/compile.py records (issue 26)


def test_to_safetensors_projection_of_a_pickle_checkpoint_matches_the_same_weights_as_safetensors():
    _validate("to-safetensors")  # torch.load of .bin shards vs load_file of the same weights (issue 39)


def test_bytecode_projection_of_torch_compiled_from_source_matches_torch_with_its_bytecode_cached():
    _validate("bytecode")  # issue 38


def test_prewarm_imports_projection_of_evicted_site_packages_matches_resident_ones():
    # issue 38: torch and a transformers model imported with their packages evicted; the twin
    # (the same imports resident) learnt from unmeasured start-ups (--reference)
    _validate("prewarm-imports")


def test_the_benchmark_script_runs_end_to_end_in_smoke_mode(tmp_path):
    """benchmarks/whatif_validation.py --smoke: tiny checkpoints, one start-up a side. Checks
    that the script works and writes its figures, never the figures themselves."""
    import json
    import subprocess

    out = tmp_path / "whatif.json"
    completed = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "whatif_validation.py"), "--smoke",
                                "--cache-root", str(tmp_path / "cache"), "--json", str(out)],
                               capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| case | runs a side |" in completed.stdout
    results = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == set(validation.CASES)
    for case in ("prewarm", "serving-dtype"):
        r = results[case]
        assert r["projected_p50_s"] > 0 and r["measured_p50_s"] > 0 and len(r["baseline_s"]) == 1
        assert r["assumptions"]
    # A lever never adds time. Whether the tiny smoke files were read cold depends on the page
    # cache of a busy machine, so the size of the effect is the validation tests' to check.
    assert results["prewarm"]["projected_p50_s"] <= results["prewarm"]["baseline_p50_s"]
