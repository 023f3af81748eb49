"""Every shard cold (issue 39, item 4): a fresh node, the usual autoscaling case, has no warm
shard to contrast with. A fresh process loads 4 evicted safetensors shards; ``analyze`` still
reports ``cold_cache`` with the bytes read from storage and their rate, says the saving needs
a floor, and with the floor of the same files states the saving ``whatif --lever prewarm``
projects for the same trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from storage_cases import set_state

pytestmark = pytest.mark.process

SHARDS = 4
SHARD_MB = 32

CHILD = """
import otel_coldstart
otel_coldstart.instrument(summary=False)
import sys, torch
from safetensors import safe_open
for path in sys.argv[1:]:
    with safe_open(path, framework="pt") as handle:
        for key in handle.keys():
            handle.get_tensor(key).sum()  # every byte used, as a loader's copy would
otel_coldstart.ready()
"""


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def all_cold(tmp_path_factory):
    import torch
    from safetensors.torch import save_file

    work = tmp_path_factory.mktemp("all-cold")
    paths = []
    for index in range(SHARDS):
        path = str(work / f"model-{index + 1:05d}-of-{SHARDS:05d}.safetensors")
        save_file({f"layer.{index}.{n}": torch.randn(SHARD_MB * (1 << 20) // 4 // 4) for n in range(4)}, path)
        paths.append(path)
    for path in paths:
        set_state(path, "evicted")
    traces = work / "traces"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_EXPORTER_OTLP", "TRACEPARENT"))}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(traces)
    script = work / "child.py"
    script.write_text(CHILD)
    completed = subprocess.run([sys.executable, str(script), *paths], env=env, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    floor = _cli("floor", "--json", *paths)
    assert floor.returncode == 0, floor.stderr[-2000:]
    floor_json = work / "floor.json"
    floor_json.write_text(floor.stdout)
    return str(traces), str(floor_json)


def _cold_cache(document: dict) -> dict | None:
    return next((f for f in document["findings"] if f["rule"] == "cold_cache"), None)


def test_every_shard_cold_still_gets_a_storage_finding_that_says_it_needs_a_floor(all_cold):
    traces, _ = all_cold
    completed = _cli("analyze", traces, "--format", "json")
    assert completed.returncode == 0, completed.stderr[-2000:]
    found = _cold_cache(json.loads(completed.stdout))
    assert found is not None, [f["rule"] for f in json.loads(completed.stdout)["findings"]]
    text = " ".join(found["evidence"])
    assert "every shard of the start-up" in text and "read from storage during the start-up" in text
    assert "/s from storage" in text  # the rate the shards read at
    assert not found["saving_s"]  # no reference: no figure
    assert "saving needs a floor: `otel-coldstart floor FILES`" in text
    printed = _cli("analyze", traces)
    assert "saving needs a floor: `otel-coldstart floor FILES`" in printed.stdout


def test_with_the_floor_the_saving_is_the_prewarm_projection(all_cold):
    traces, floor_json = all_cold
    completed = _cli("analyze", traces, floor_json, "--format", "json")
    assert completed.returncode == 0, completed.stderr[-2000:]
    found = _cold_cache(json.loads(completed.stdout))
    assert found is not None and found["saving_s"] > 0
    whatif = _cli("whatif", traces, floor_json, "--lever", "prewarm", "--format", "json")
    assert whatif.returncode == 0, whatif.stderr[-2000:]
    projected = json.loads(whatif.stdout)["levers"][0]["saving_p50_s"]
    assert found["saving_s"] == pytest.approx(projected, abs=1e-3)
    assert any("storage floor" in line for line in found["evidence"])
