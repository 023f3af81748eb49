"""The README's first command: the demo, end to end, and analyze on what it wrote."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from otel_coldstart import probes
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`


def test_demo_shows_a_cold_first_shard_and_analyze_reads_it_back(tmp_path):
    checkpoint = tmp_path / "ckpt"
    traces = tmp_path / "traces"
    env = dict(os.environ)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_COLDSTART_SUMMARY", None)
    result = subprocess.run(
        [sys.executable, "-m", "otel_coldstart", "demo", "--checkpoint-dir", str(checkpoint), "--output-dir", str(traces)],
        capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # The report is the result (stdout: `demo > report.txt` keeps it); progress stays on stderr.
    assert "start-up breakdown" in result.stdout and "dominant" in result.stdout
    assert "findings" in result.stdout and "analyze it again" in result.stdout
    assert "start-up breakdown" not in result.stderr and "[demo] checkpoint:" in result.stderr
    assert "[demo]" not in result.stdout
    (trace_file,) = glob.glob(str(traces / "*.otlp.jsonl"))
    (breakdown,) = breakdowns(read_trace_file(trace_file))
    assert breakdown.ready
    assert [s.index for s in breakdown.shards] == [0, 1, 2, 3]
    assert all(s.count == 4 for s in breakdown.shards)
    if probes.read_bytes_trusted(trace_file) and "could not be evicted" not in result.stderr:
        assert [s.cache_state for s in breakdown.shards] == ["cold", "warm", "warm", "warm"]
        assert breakdown.shards[0].read_bytes > 0
        assert all(s.read_bytes < 0.05 * s.size for s in breakdown.shards[1:])
    assert breakdown.phase("cast").bytes == sum(s.size for s in breakdown.shards) - sum(
        _header_size(p) for p in sorted(glob.glob(str(checkpoint / "*.safetensors"))))

    again = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", trace_file],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "deserialize" in again.stdout and "cast" in again.stdout and "unattributed" in again.stdout

    # A second run reuses the cached checkpoint and never overwrites the first trace.
    second = subprocess.run(
        [sys.executable, "-m", "otel_coldstart", "demo", "--checkpoint-dir", str(checkpoint), "--output-dir", str(traces), "--warm"],
        capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path),
    )
    assert second.returncode == 0, second.stderr
    assert len(glob.glob(str(traces / "*.otlp.jsonl"))) == 2


def _header_size(path: str) -> int:
    with open(path, "rb") as handle:
        return 8 + int.from_bytes(handle.read(8), "little")
