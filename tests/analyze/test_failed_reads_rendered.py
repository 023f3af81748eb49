"""Issue 21.4 (rendering): a checkpoint read that raised (a truncated file, a missing one, a
directory) is marked failed in every format, with what it raised, and is no evidence: it
is left out of cold rates, throughput and savings.

The first test is a real start-up in a fresh process (real safetensors and torch reads of
real broken files), read back by the CLI as a user would; the second pins the rules on
hand-built records, where the failed read carries a cold cache verdict that must not count."""

from __future__ import annotations

import dataclasses
import glob
import io
import json
import os
import subprocess
import sys

import pytest

from analyze_records import MS, child, only, root, shard
from otel_coldstart.analyze.findings import find
from otel_coldstart.analyze.render import render_startup_text
from otel_coldstart.analyze.render_json import startup_to_dict

CHILD = r"""
import os, sys
import otel_coldstart
otel_coldstart.instrument(start_at="instrument")
import torch
from safetensors.torch import load_file
for path in ("truncated.safetensors", "missing.safetensors", "a-directory.safetensors"):
    try:
        load_file(path)
    except Exception as error:
        print("raised", type(error).__name__)
try:
    torch.load("truncated.pt", weights_only=True)
except Exception as error:
    print("raised", type(error).__name__)
load_file("good.safetensors")
otel_coldstart.ready()
"""


def _cli(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *argv], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.process
def test_failed_reads_of_a_real_startup_are_marked_in_every_format(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(512, 512)}, str(tmp_path / "good.safetensors"))  # 1 MiB
    data = (tmp_path / "good.safetensors").read_bytes()
    (tmp_path / "truncated.safetensors").write_bytes(data[: len(data) // 2])
    (tmp_path / "a-directory.safetensors").mkdir()
    torch.save({"w": torch.zeros(256, 256)}, str(tmp_path / "full.pt"))
    (tmp_path / "truncated.pt").write_bytes((tmp_path / "full.pt").read_bytes()[:1000])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("raised") == 4
    (trace,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))

    text = _cli("analyze", trace)
    assert text.returncode == 0, text.stderr
    shard_lines = text.stdout.split("shards:")[1].splitlines()
    lines = {name: next(line for line in shard_lines if f" {name} " in line)
             for name in ("missing.safetensors", "truncated.safetensors", "a-directory.safetensors", "truncated.pt",
                          "good.safetensors")}
    assert "FAILED (FileNotFoundError)" in lines["missing.safetensors"]
    assert "FAILED (" in lines["truncated.safetensors"] and "SafetensorError" in lines["truncated.safetensors"]
    assert "FAILED (" in lines["a-directory.safetensors"]
    assert "FAILED (" in lines["truncated.pt"]
    assert "FAILED" not in lines["good.safetensors"] and "read from storage" in lines["good.safetensors"]
    assert "4 checkpoint read(s) failed" in text.stdout

    document = json.loads(_cli("analyze", trace, "--format", "json").stdout)
    (startup,) = document["startups"]
    by_name = {os.path.basename(s["path"]): s for s in startup["shards"]}
    assert by_name["missing.safetensors"]["failed"] is True
    assert by_name["missing.safetensors"]["error_type"] == "FileNotFoundError"
    assert by_name["truncated.pt"]["failed"] is True and by_name["truncated.pt"]["error_type"]
    assert by_name["good.safetensors"]["failed"] is False and by_name["good.safetensors"]["error_type"] is None
    assert all(s["cache_state"] is None for s in startup["shards"] if s["failed"])
    (deserialize,) = [p for p in startup["phases"] if p["phase"] == "deserialize"]
    assert 0 < deserialize["bytes"] <= len(data)  # the good file's bytes only

    markdown = _cli("analyze", trace, "--format", "markdown").stdout
    assert markdown.count("**failed**") == 4 and "FileNotFoundError" in markdown
    html = _cli("analyze", trace, "--format", "html").stdout
    assert html.count('<tr data-state="failed">') == 4 and "failed (FileNotFoundError)" in html
    assert html.count('<g class="row shard" data-state="failed">') == 4  # the waterfall says so too


def test_a_failed_read_is_no_evidence_of_cache_speed_or_savings():
    r = root(10_000)
    cold = shard(r, 0, 0, 6000, 1 << 30, "cold", read_bytes=1 << 30)
    cold_and_failed = dataclasses.replace(cold, attributes={**cold.attributes, "error.type": "OSError"},
                                          status="error")
    warm = shard(r, 1, 6000, 6100, 1 << 30, "warm", read_bytes=0)
    b = only([r, cold_and_failed, warm, child(r, "coldstart.build", "build", 6100, 9000)])
    failed, good = b.shards
    assert failed.failed and failed.error_type == "OSError" and failed.state is None and not failed.cold
    assert b.cold_shards == () and b.read_shards == (good,)
    deserialize = b.phase("deserialize")
    assert deserialize.busy_ns == 6100 * MS  # the time it took still counts
    assert deserialize.bytes == 1 << 30 and deserialize.failed == 1
    assert deserialize.throughput == pytest.approx((1 << 30) / 0.1)  # over the good read's 100 ms only
    assert not [f for f in find([b]) if f.rule == "cold_cache"]  # a cold verdict on a failed read saves nothing
    assert startup_to_dict(b)["cold_shards"] == []
    out = io.StringIO()
    render_startup_text(b, out)
    assert "FAILED (OSError)" in out.getvalue() and "cold" not in out.getvalue().split("shards:")[1].split("\n")[1]
