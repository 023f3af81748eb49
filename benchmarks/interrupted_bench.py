"""Issue 21's numbers, re-measured: interrupted start-ups as a user meets them, in fresh
processes, the checkpoint evicted (fsync + POSIX_FADV_DONTNEED) where it says so.

- ``16mib``: one 16 MiB safetensors file read with ``load_file``, then 3 s in phase ``warmup``
  (``time.sleep``: the tensors are not touched), no ``ready()``: the process exits. Again with
  a warm-up that touches every tensor (``--touch``).
- ``sigkill-warmup``: 4 x 30 MiB shards read (and touched), SIGKILL 1.5 s into ``warmup``.
- ``sigkill-0.5s``: SIGKILL 0.5 s after the process was started, inside a ``download`` phase.
- ``otel-instrument``: ``opentelemetry-instrument`` with the distro's defaults (OTLP grpc,
  traces and metrics) and no collector: exit time with the plugin against the plugin disabled.
- ``never-answers``: a collector that accepts connections and never answers; SIGTERM before
  ``ready()``: seconds from the signal to the process's end.

Each scenario's report is read back with ``otel-coldstart analyze --format json`` (exit code
kept). Run on a quiet machine for the record::

    python benchmarks/interrupted_bench.py --runs 5 [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_average  # noqa: E402

PY = sys.executable
MIB = 1 << 20

SIXTEEN = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
import safetensors.torch
state = safetensors.torch.load_file(sys.argv[1])
with otel_coldstart.phase("warmup"):
    if sys.argv[2] == "touch":
        for t in state.values():
            t.sum()
    time.sleep(3)
"""

SHARDS = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
import safetensors.torch
with otel_coldstart.phase("load"):
    for path in sys.argv[1:]:
        for t in safetensors.torch.load_file(path).values():
            t.sum()
with otel_coldstart.phase("warmup"):
    print("IN_WARMUP", flush=True)
    time.sleep(120)
"""

EARLY = r"""
import time
import otel_coldstart
otel_coldstart.instrument()
with otel_coldstart.phase("download"):
    print("IN_DOWNLOAD", flush=True)
    time.sleep(120)
"""

APP = r"""
import time
import otel_coldstart
with otel_coldstart.phase("load"):
    time.sleep(0.2)
"""

WAITS = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
with otel_coldstart.phase("load"):
    print("GO", flush=True)
    time.sleep(120)
"""


def _env(out: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": out, "OTEL_COLDSTART_SUMMARY": "0"})
    env.update(extra)
    return env


def _evict(path: str) -> None:
    from otel_coldstart.probes import evict_from_page_cache  # the project's one eviction

    if not evict_from_page_cache(path):
        raise SystemExit(f"cannot evict {path} from the page cache")


def _analyze(out: str) -> tuple[int, dict]:
    (path,) = glob.glob(os.path.join(out, "startup-*.otlp.jsonl"))
    done = subprocess.run([PY, "-m", "otel_coldstart", "analyze", "--format", "json", path], capture_output=True,
                          text=True, timeout=120)
    document = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, (document.get("startups") or [{}])[0]


def _phase_s(startup: dict, name: str) -> float | None:
    for phase in startup.get("phases", []):
        if phase.get("phase") == name:
            return phase.get("busy_s")
    return None


def _tensors(path: str, nbytes: int) -> None:
    import safetensors.torch
    import torch

    safetensors.torch.save_file({"w": torch.randn(nbytes // 4)}, path)


def sixteen(work: str, touch: bool) -> dict:
    path = os.path.join(work, "m16.safetensors")
    if not os.path.exists(path):
        _tensors(path, 16 * MIB)
    out = tempfile.mkdtemp(dir=work)
    _evict(path)
    subprocess.run([PY, "-c", SIXTEEN, path, "touch" if touch else "sleep"], env=_env(out), check=True, timeout=120,
                   capture_output=True)
    code, startup = _analyze(out)
    (shard,) = startup.get("shards") or [{}]
    duration = startup.get("duration_s") or 0
    return {"deserialize_s": _phase_s(startup, "deserialize"), "warmup_s": _phase_s(startup, "warmup"),
            "parallelism": startup.get("parallelism"), "duration_s": duration,
            "end_phase": startup.get("end_phase"), "cache_state": shard.get("cache_state"),
            "read_from_storage_mib": (shard.get("read_bytes") or 0) / MIB, "exit": code}


def sigkill_warmup(work: str) -> dict:
    shards = []
    for i in range(4):
        path = os.path.join(work, f"model-0000{i + 1}-of-00004.safetensors")
        if not os.path.exists(path):
            _tensors(path, 30 * MIB)
        _evict(path)
        shards.append(path)
    out = tempfile.mkdtemp(dir=work)
    process = subprocess.Popen([PY, "-c", SHARDS, *shards], env=_env(out), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    assert process.stdout.readline().strip() == "IN_WARMUP"
    time.sleep(1.5)
    process.send_signal(signal.SIGKILL)
    process.wait()
    code, startup = _analyze(out)
    listed = startup.get("shards") or []
    return {"exit": code, "end_reason": startup.get("end_reason"), "shards_listed": len(listed),
            "cold": sum(1 for s in listed if s.get("cache_state") == "cold"),
            "read_from_storage_mib": [round((s.get("read_bytes") or 0) / MIB, 1) for s in listed]}


def sigkill_early(work: str, after_instrument: bool) -> dict:
    """SIGKILL 0.5 s after the process was spawned (the issue's measure: whether instrument()
    has run by then depends on the machine), or 0.5 s after instrument() returned."""
    out = tempfile.mkdtemp(dir=work)
    started = time.monotonic()
    process = subprocess.Popen([PY, "-c", EARLY], env=_env(out), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    if after_instrument:
        assert process.stdout.readline().strip() == "IN_DOWNLOAD"
        started = time.monotonic()
    time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    process.send_signal(signal.SIGKILL)
    process.wait()
    files = glob.glob(os.path.join(out, "startup-*.otlp.jsonl"))
    if not files:
        return {"file": False}
    code, startup = _analyze(out)
    return {"file": True, "exit": code, "end_reason": startup.get("end_reason"),
            "killed_phase": (startup.get("killed") or {}).get("phase"),
            "last_sign_of_life_s": (startup.get("killed") or {}).get("last_sign_of_life_s")}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def otel_instrument(work: str) -> dict:
    instrument = os.path.join(os.path.dirname(PY), "opentelemetry-instrument")
    times = {}
    for run, extra in (("plain", {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "coldstart"}), ("plugin", {})):
        out = tempfile.mkdtemp(dir=work)
        started = time.monotonic()
        # No OTLP variables at all: the distro's defaults (localhost:4317, grpc), no collector there.
        subprocess.run([instrument, PY, "-c", APP], env=_env(out, **extra), capture_output=True, timeout=120)
        times[run] = time.monotonic() - started
    return times


def never_answers(work: str) -> dict:
    out = tempfile.mkdtemp(dir=work)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        env = _env(out, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.getsockname()[1]}",
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
        process = subprocess.Popen([PY, "-c", WAITS], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
        assert process.stdout.readline().strip() == "GO"
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait()
        took = time.monotonic() - sent
    return {"sigterm_to_exit_s": took, "returncode": process.returncode,
            "fallback_file": bool(glob.glob(os.path.join(out, "startup-*.otlp.jsonl")))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="coldstart-interrupted-")
    results: dict = {"load_average_before": load_average()}
    runs: dict[str, list] = {"16mib": [], "16mib-touch": [], "sigkill-warmup": [], "sigkill-0.5s": [],
                             "sigkill-0.5s-after-instrument": [], "otel-instrument": [], "never-answers": []}
    for _ in range(args.runs):
        runs["16mib"].append(sixteen(work, False))
        runs["16mib-touch"].append(sixteen(work, True))
        runs["sigkill-warmup"].append(sigkill_warmup(work))
        runs["sigkill-0.5s"].append(sigkill_early(work, False))
        runs["sigkill-0.5s-after-instrument"].append(sigkill_early(work, True))
        runs["otel-instrument"].append(otel_instrument(work))
        runs["never-answers"].append(never_answers(work))
    results["runs"] = runs
    results["load_average_after"] = load_average()
    plain = [r["plain"] for r in runs["otel-instrument"]]
    plugin = [r["plugin"] for r in runs["otel-instrument"]]
    results["otel_instrument_median_s"] = {"plain": statistics.median(plain), "plugin": statistics.median(plugin)}
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
