"""Many small checkpoint files folded into one aggregate (issue 39 item 1), in fresh processes.

A per-layer checkpoint of 2,000 files of 4 KiB paid a span per file (+160 us a file on a quiet
machine, charged to ``deserialize``). Past the first ``SPANS_FOR_FIRST_SMALL`` files under
``FOLD_BELOW_BYTES``, small files now join one aggregate per (parent, api)
(patches/_folded_files.py). The report must stay true: the files, their bytes and their read
time add up to what the child measured per file, a real shard keeps its span and its
cold-cache evidence, cold small files are said cold with their bytes from storage, a SIGKILL
keeps the folded figures, and the tensors are bit-identical to a plain run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from _child import python_child
from otel_coldstart.patches._folded_files import FOLD_BELOW_BYTES, SPANS_FOR_FIRST_SMALL
from storage_cases import set_state

pytestmark = pytest.mark.process  # starts fresh Python processes

FILES = 2000
BIG_BYTES = 2 << 20  # a real shard: over FOLD_BELOW_BYTES, keeps its span

# Half the files with load_file, half with safe_open + get_tensor (as transformers reads a
# shard), after one big shard; each call timed by the child (the per-file truth); the
# tensors hashed outside the timed calls.
LOADS = r"""
import hashlib, json, sys, time
side, listing = sys.argv[1], sys.argv[2]
if side == "coldstart":
    import otel_coldstart
    otel_coldstart.instrument(summary=False)
import torch
from safetensors import safe_open
from safetensors.torch import load_file
paths = open(listing, encoding="utf-8").read().split()
digest = hashlib.sha256()
total = small_ns = 0
for number, path in enumerate(paths):
    began = time.time_ns()
    if number % 2:
        with safe_open(path, framework="pt") as handle:
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    else:
        tensors = load_file(path)
    if number:  # paths[0] is the big shard
        small_ns += time.time_ns() - began
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].numpy().tobytes())
    total += sum(t.nbytes for t in tensors.values())
if side == "coldstart":
    otel_coldstart.ready()
print(json.dumps({"sha256": digest.hexdigest(), "bytes": total, "small_ns": small_ns}))
"""

# Small files read at the root (no phase of ours ends over them: their aggregate waits for
# ready()), then a warm-up that never ends; killed in it.
LOADED_THEN_WARMUP = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument(summary=False)
import torch
from safetensors.torch import load_file
paths = open(sys.argv[1], encoding="utf-8").read().split()
total = sum(t.nbytes for path in paths for t in load_file(path).values())
print("LOADED", total, flush=True)
with otel_coldstart.phase("warmup"):
    time.sleep(120)
"""


def _save_small(directory, count: int, start: int = 0) -> list[str]:
    import torch
    from safetensors.torch import save_file

    paths = []
    for number in range(start, start + count):
        path = os.path.join(directory, f"layer-{number:05d}.safetensors")
        save_file({f"layers.{number}.weight": torch.arange(1024, dtype=torch.float32) + number}, path)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One 2 MiB shard and 2,000 files of 4 KiB, with a listing of them (the shard first)."""
    import torch
    from safetensors.torch import save_file

    directory = tmp_path_factory.mktemp("per-layer")
    big = str(directory / "big.safetensors")
    save_file({"embed.weight": torch.randn(BIG_BYTES // 4)}, big)
    paths = [big] + _save_small(str(directory), FILES)
    listing = directory / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    return str(directory), str(listing), paths


def _env(traces) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(traces), "OTEL_COLDSTART_SUMMARY": "0"})
    return env


def _run(script: str, traces, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], env=_env(traces), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _analyze(traces, *extra: str, expect_rc: int = 0) -> subprocess.CompletedProcess:
    (path,) = traces.glob("startup-*.otlp.jsonl")
    done = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", str(path), *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == expect_rc, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def two_thousand(checkpoint, tmp_path_factory):
    """The plain and the instrumented run of the same reads, and the instrumented one's report."""
    _, listing, _ = checkpoint
    work = tmp_path_factory.mktemp("runs")
    plain = _run(LOADS, work / "plain-traces", "plain", listing)
    traced = _run(LOADS, work / "traces", "coldstart", listing)
    document = json.loads(_analyze(work / "traces", "--format", "json").stdout)
    text = _analyze(work / "traces").stdout
    (startup,) = document["startups"]
    return plain, traced, startup, text


def test_the_tensors_are_bit_identical(two_thousand):
    plain, traced, _, _ = two_thousand
    assert traced["sha256"] == plain["sha256"]
    assert traced["bytes"] == plain["bytes"]


def test_the_report_keeps_every_file_its_bytes_and_its_read_time(checkpoint, two_thousand):
    _, _, paths = checkpoint
    _, traced, startup, _ = two_thousand
    shards = startup["shards"]
    folded = [s for s in shards if s["folded"]]
    assert folded, "no file was folded"
    assert sum(s["files"] for s in shards) == len(paths)  # every file, once
    assert sum(s["size_bytes"] for s in shards) == sum(os.path.getsize(p) for p in paths)
    (deserialize,) = [p for p in startup["phases"] if p["phase"] == "deserialize"]
    assert deserialize["bytes"] == traced["bytes"]  # the tensors' bytes, as the child summed them
    # The small files' read time: each file's is inside the child's own timing of its call.
    small = [s for s in shards if not s["path"] or not s["path"].endswith("big.safetensors")]
    reported = sum(s["duration_s"] for s in small)
    measured = traced["small_ns"] / 1e9
    assert 0.5 * measured <= reported <= measured, (reported, measured)
    # The first small files keep their span (a small model reads as before); the rest fold,
    # one aggregate per api.
    assert sum(1 for s in small if not s["folded"]) == SPANS_FOR_FIRST_SMALL
    assert sum(s["files"] for s in folded) == FILES - SPANS_FOR_FIRST_SMALL
    assert len(folded) == 2
    for row in folded:
        assert row["file_states"] == {"warm": row["files"]}, row  # resident: every one warm
        assert row["read_bytes"] == 0 and row["cache_state"] == "warm", row


def test_a_real_shard_keeps_its_span_and_its_evidence(two_thousand):
    _, _, startup, _ = two_thousand
    (big,) = [s for s in startup["shards"] if s["path"] and s["path"].endswith("big.safetensors")]
    assert big["size_bytes"] > FOLD_BELOW_BYTES
    assert not big["folded"] and big["files"] == 1
    assert big["resident_ratio"] is not None  # residency measured before its read, as before
    assert big["read_bytes"] is not None and big["cache_state"] is not None


def test_the_text_report_lists_the_folded_files_in_one_line(two_thousand):
    _, _, _, text = two_thousand
    folded_lines = [line for line in text.splitlines() if "small files, folded" in line]
    assert len(folded_lines) == 2, text
    assert all("warm (" in line for line in folded_lines), folded_lines
    assert len(text.splitlines()) < 120, "2,000 files printed line by line"


def test_cold_small_files_are_said_cold_with_their_bytes_from_storage(tmp_path):
    count = SPANS_FOR_FIRST_SMALL + 40
    directory = tmp_path / "cold"
    directory.mkdir()
    paths = _save_small(str(directory), count)
    for path in paths:
        set_state(path, "evicted")
    listing = tmp_path / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    script = LOADED_THEN_WARMUP.replace('print("LOADED", total, flush=True)\nwith otel_coldstart.phase("warmup"):\n'
                                        '    time.sleep(120)\n', "otel_coldstart.ready()\n")
    done = subprocess.run([sys.executable, "-c", script, str(listing)], env=_env(tmp_path / "traces"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(_analyze(tmp_path / "traces", "--format", "json").stdout)
    (startup,) = document["startups"]
    (folded,) = [s for s in startup["shards"] if s["folded"]]
    sizes = sum(os.path.getsize(p) for p in paths[SPANS_FOR_FIRST_SMALL:])
    assert folded["files"] == count - SPANS_FOR_FIRST_SMALL
    assert folded["file_states"].get("cold", 0) >= 0.9 * folded["files"], folded
    assert folded["cache_state"] in ("cold", "partial"), folded
    assert 0.9 * sizes <= folded["read_bytes"] <= sizes, (folded, sizes)  # never above the files' size
    assert startup["cold_shards"], startup["cold_shards"]
    # The storage finding counts files, a folded row as the files it holds.
    (finding,) = [f for f in document["findings"] if f["rule"] == "cold_cache"]
    cold_files = sum(s["files"] for s in startup["shards"] if s["cache_state"] in ("cold", "partial"))
    assert cold_files >= count - 4 and f"{cold_files:,} " in finding["title"], (finding, cold_files)


def test_a_sigkill_keeps_the_folded_files(tmp_path):
    count = SPANS_FOR_FIRST_SMALL + 268
    directory = tmp_path / "files"
    directory.mkdir()
    paths = _save_small(str(directory), count)
    listing = tmp_path / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    traces = tmp_path / "traces"
    with python_child(LOADED_THEN_WARMUP, str(listing), env=_env(traces)) as process:
        ready, _, _ = select.select([process.stdout], [], [], 300)
        line = process.stdout.readline().strip() if ready else ""
        assert line.startswith("LOADED"), (line, process.stderr.read() if process.poll() is not None else "")
        time.sleep(1.5)  # the in-flight monitor writes the aggregate within about a second
        process.send_signal(signal.SIGKILL)  # no handler runs
        assert process.wait(timeout=30) == -signal.SIGKILL
    (startup,) = json.loads(_analyze(traces, "--format", "json", expect_rc=11).stdout)["startups"]
    assert startup["end_reason"] == "killed"
    folded = [s for s in startup["shards"] if s["folded"]]
    assert sum(s["files"] for s in folded) == count - SPANS_FOR_FIRST_SMALL, startup["shards"]
    assert sum(s["size_bytes"] for s in folded) == sum(os.path.getsize(p) for p in paths[SPANS_FOR_FIRST_SMALL:])
    (deserialize,) = [p for p in startup["phases"] if p["phase"] == "deserialize"]
    assert deserialize["bytes"] == int(line.split()[1])  # every tensor byte: the spans' and the folded ones'
