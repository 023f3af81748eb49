"""torch.compile provenance as a user meets it: the same start-up twice in fresh processes on
CPU, first with an empty TORCHINDUCTOR_CACHE_DIR, then with the cache the first one left.
``otel-coldstart analyze --format json`` says misses, then hits; the first report has the
compile_cache finding with its lever, the second none; given both, the first's saving is
estimated from the second's hit of the same graph.

Inductor takes ~10 s cold here: one tiny function, one test."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.process

SCRIPT = textwrap.dedent("""
    import sys
    import otel_coldstart
    otel_coldstart.instrument()
    import torch

    def tiny(x):  # an extern matmul: a graph to cache, no C++ kernel to build (seconds a start-up)
        return x @ x.T

    x = torch.arange(8.0).reshape(2, 4)
    out = torch.compile(tiny)(x)
    assert torch.equal(out, x @ x.T)
    otel_coldstart.ready()
""")


def _start_up(tmp_path, name: str, cache_dir) -> str:
    out_dir = tmp_path / name
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(OTEL_COLDSTART_SUMMARY="0", OTEL_COLDSTART_OUTPUT_DIR=str(out_dir),
               TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
    completed = subprocess.run([sys.executable, str(tmp_path / "start.py")], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    (trace_file,) = glob.glob(str(out_dir / "*.otlp.jsonl"))
    return trace_file


def _analyze(*files: str) -> dict:
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", *files],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def _compile_cache(document: dict) -> list[dict]:
    return [f for f in document["findings"] if f["rule"] == "compile_cache"]


def test_an_empty_compile_cache_then_the_cache_it_left_reads_misses_then_hits(tmp_path):
    (tmp_path / "start.py").write_text(SCRIPT)
    cache_dir = tmp_path / "inductor-cache"
    cold = _start_up(tmp_path, "cold", cache_dir)
    warm = _start_up(tmp_path, "warm", cache_dir)

    first = _analyze(cold)
    (startup,) = first["startups"]
    compiled = startup["compile"]
    assert compiled["compilations"] == 1 and compiled["recompilations"] == 0
    assert compiled["cache_misses"] >= 1 and compiled["cache_hits"] == 0
    assert compiled["stages"]["dynamo"] > 0 and compiled["stages"]["inductor"] > 0
    assert compiled["cache_dirs"] == [str(cache_dir)]
    (item,) = compiled["items"]
    assert item["frame"].startswith("tiny (") and item["caches"]["fx_graph"]["misses"] == 1
    (finding,) = _compile_cache(first)
    assert "TORCHINDUCTOR_CACHE_DIR" in finding["lever"] and "load_cache_artifacts" in finding["lever"]
    assert finding["saving_s"] == 0 and finding["saving_basis"].startswith("not estimated")

    second = _analyze(warm)
    (startup,) = second["startups"]
    assert startup["compile"]["cache_hits"] >= 1 and startup["compile"]["cache_misses"] == 0
    assert startup["compile"]["items"][0]["frame"] == item["frame"]  # the same graph, by its key
    assert _compile_cache(second) == []

    both = _analyze(cold, warm)
    (finding,) = _compile_cache(both)
    cold_s, warm_s = (s["compile"]["seconds"] for s in sorted(both["startups"], key=lambda s: s["start_unix_ns"]))
    assert 0 < finding["saving_s"] <= cold_s - warm_s + 1e-6  # own times: the imports inside it stay
    assert finding["saving_basis"].startswith("the compile-cache lever's projection")
    # the same figure whatif projects for the cold start-up, learning the hit from the warm one
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "whatif", cold, "--reference", warm,
                                "--lever", "compile-cache", "--format", "json"],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert finding["saving_s"] == pytest.approx(json.loads(completed.stdout)["levers"][0]["saving_p50_s"], abs=1e-3)
