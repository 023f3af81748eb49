"""Inputs and gates as a user meets them: several files (a torchrun directory whose launcher
span is in a sibling file), a bad file among good ones, a storage floor document given
beside the traces, typo'd budgets, an unknown --by, progress on a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from analyze_records import data_file
from otel_coldstart.cli import main

COLD = data_file("demo-cold-first-shard.otlp.jsonl")
WARM = data_file("demo-warm.otlp.jsonl")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmarks")


def otlp_line(*spans) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]})


def span(span_id, parent=None, name="model.startup", start=1_700_000_000_000_000_000, ms=1000, attrs=()):
    raw = {"traceId": "ab" * 16, "spanId": span_id, "name": name, "startTimeUnixNano": str(start),
           "endTimeUnixNano": str(start + ms * 1_000_000), "attributes": list(attrs)}
    if parent:
        raw["parentSpanId"] = parent
    return raw


def test_torchrun_directory_no_false_missing_parent_warning(tmp_path, capsys):
    """`otel-coldstart run torchrun ...` writes the launcher's span in one file and each rank's
    start-up (parented to it) in another: checked together, nothing is missing."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launcher.jsonl").write_text(otlp_line(span("00000000000000aa", name="otel-coldstart run")) + "\n")
    for rank in (0, 1):
        (run_dir / f"rank{rank}.jsonl").write_text(otlp_line(
            span(f"00000000000000{rank}1", "00000000000000aa", attrs=[
                {"key": "coldstart.rank", "value": {"intValue": str(rank)}}])) + "\n")
    assert main(["analyze", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "not in the input" not in err
    assert main(["analyze", str(run_dir / "rank0.jsonl")]) == 0  # alone, the launcher is missing
    assert "1 span(s) point at a parent that is not in the input" in capsys.readouterr().err


@pytest.mark.process
def test_a_bad_file_in_a_directory_is_skipped_with_exit_10(tmp_path, capsys):
    shutil.copy(COLD, tmp_path / "a.jsonl")
    shutil.copy(WARM, tmp_path / "b.jsonl")
    (tmp_path / "c.json").write_text('{"not": "a trace"}')
    good = otlp_line(span("00000000000000d1"))
    (tmp_path / "d.jsonl").write_text(good + "\n" + good[: len(good) // 2])
    code = main(["capacity", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 12 and "Traceback" not in captured.err
    assert "all start-ups: n=3 start-up(s)" in captured.out  # a, b and d's first line
    assert f"{tmp_path / 'c.json'}: not a trace" in captured.err and "file skipped" in captured.err
    assert f"{tmp_path / 'd.jsonl'}: line 2 is truncated" in captured.err
    # fresh process, as CI meets it
    result = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", str(tmp_path), "--format", "json"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 12 and json.loads(result.stdout)["skipped"]


def test_only_bad_files_is_still_an_error(tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"not": "a trace"}')
    (tmp_path / "e.json").write_text("")
    assert main(["analyze", str(tmp_path)]) == 4


def test_storage_floor_document_beside_the_trace(tmp_path, capsys):
    floor = {"format": "otel-coldstart.floor", "version": 1, "block_size": 1 << 20, "total_bytes": 1 << 30,
             "files": [{"path": "/ckpt/a", "bytes": 1 << 30}],
             "cold": {"runs": 3, "bytes_per_s": 2.6e9, "seconds": [0.4], "evicted": True,
                      "resident_after_evict": [0.0]},
             "warm": {"runs": 3, "bytes_per_s": 2.6e10, "seconds": [0.04]}}
    path = tmp_path / "floor.json"
    path.write_text(json.dumps(floor))
    assert main(["analyze", COLD, str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["storage_floor"]["warm_bytes_per_s"] == 2.6e10
    cold = [f for f in doc["findings"] if f["rule"] == "cold_cache"]
    assert cold and any("storage floor" in line for line in cold[0]["evidence"])
    assert main(["analyze", COLD, str(path)]) == 0 and "storage floor" in capsys.readouterr().out


def test_budget_typos_are_usage_errors(capsys):
    assert main(["analyze", COLD, "--budget", "totl=3s"]) == 2
    err = capsys.readouterr().err
    assert "unknown budget key(s): totl" in err and "valid keys: total, unattributed" in err
    assert main(["analyze", COLD, "--budget", "deserialise=1ms"]) == 2
    assert main(["analyze", COLD, "--budget", "import_libraries=1ms"]) == 8  # a user phase in the trace
    assert main(["analyze", COLD, "--budget", "total=1h"]) == 0


def test_capacity_unknown_by_lists_known_keys(capsys):
    assert main(["capacity", COLD, "--by", "k8s.node.name"]) == 2
    err = capsys.readouterr().err
    assert "--by k8s.node.name: no start-up has this attribute; known keys:" in err and "service.name" in err


def test_compare_header_in_every_format(capsys):
    for fmt in ("text", "markdown", "json"):
        assert main(["compare", WARM, COLD, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert f"A: {WARM} (1 start-ups; 0 cold, 1 warm)" in out
        assert f"B: {COLD} (1 start-ups; 1 cold, 0 warm)" in out


def _scale_file(tmp_path, spans: int) -> str:
    sys.path.insert(0, BENCH)
    try:
        import analyzer_scale
    finally:
        sys.path.remove(BENCH)
    path = str(tmp_path / "big.jsonl")
    analyzer_scale.write_trace(path, spans)
    return path


def _run_on_pty(argv, timeout=300):
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, cwd=REPO)
    os.close(slave)
    chunks, deadline, exited = [], time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        # Once it has exited, what it wrote before is read to the end without waiting.
        ready, _, _ = select.select([master], [], [], 0 if exited else 0.5)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif exited:
            break
        else:
            exited = proc.poll() is not None
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


# The CLI with progress shown from the first report (PROGRESS_AFTER_S = 0): whether a read
# passes the 1 s threshold depends on the machine's load, and a test that guessed it from the
# whole command's wall time failed when the reading was quick and the rest slow.
# Progress from the first line on (no second's wait before the first report, none between two):
# a file of a few thousand spans then shows it, where the defaults need one that takes seconds.
PROGRESS_FROM_THE_START = (
    "import sys; import otel_coldstart.cli._inputs as inputs; inputs.PROGRESS_AFTER_S = 0.0; "
    "import otel_coldstart.analyze.readers as readers; readers.PROGRESS_EVERY_S = 0.0; "
    "from otel_coldstart.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.process
def test_progress_on_a_terminal_only(tmp_path):
    path = _scale_file(tmp_path, 10_000)
    argv = [sys.executable, "-c", PROGRESS_FROM_THE_START, "analyze", path, "--format", "json"]
    code, err = _run_on_pty(argv)
    assert code == 0
    assert "otel-coldstart: reading big.jsonl:" in err and "MiB)" in err, err
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    assert piped.returncode == 0 and "reading big.jsonl" not in piped.stderr
