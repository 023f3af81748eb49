"""One trace file per start-up, as the plugin writes them (issue 25.7, the per-file layout of
benchmarks/fleet_scale.py). A file that fits in the read buffer is read whole at once
(readers._open), compare reads both of its sides at once (cli/_inputs.load_sides), and the
end of a file no longer closes the assembler's chunk. What a user sees stays as it was: the
entries of a directory that are not trace files are reported the same way and a FIFO among
them is never opened, a file that grows or shrinks while it is read is read to its end, the
same records come from a file read whole or streamed, and compare still says A's problems
before B's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from analyze_records import data_file
from otel_coldstart.analyze import readers
from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTUPS = ("demo-warm.otlp.jsonl", "demo-cold-first-shard.otlp.jsonl", "demo-two-ranks.otlp.jsonl")


def _cli(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *argv], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=REPO))


def _nobody_reads(fifo: str) -> bool:
    """True when no process holds ``fifo`` open for reading (a writer's non-blocking open
    succeeds only then)."""
    opened = threading.Event()

    def writer():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        opened.set()
        os.close(fd)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(5)
    return not opened.is_set()


@pytest.mark.process
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_entries_that_are_not_trace_files_are_reported_as_before(tmp_path, jobs):
    for name in STARTUPS:
        shutil.copy(data_file(name), tmp_path / name)
    os.mkfifo(tmp_path / "fifo.jsonl")  # nobody writes: an open for reading would block
    (tmp_path / "dir.json").mkdir()
    os.symlink(tmp_path / "gone.json", tmp_path / "dangling.json")
    (tmp_path / "empty.json").write_bytes(b"")
    result = _cli("capacity", str(tmp_path), "--jobs", jobs, "--format", "json", timeout=60)
    assert result.returncode == 12, result.stderr  # made from less than it was given
    assert json.loads(result.stdout)["groups"][0]["startups"] == 4  # demo-two-ranks holds two
    where = str(tmp_path)
    assert result.stderr.splitlines() == [
        f"otel-coldstart: warning: cannot read {where}/dangling.json: not a regular file: {where}/dangling.json; "
        "file skipped",
        f"otel-coldstart: warning: {where}/dir.json: not a regular file (a device, FIFO or socket); save the trace "
        "to a file; file skipped",
        f"otel-coldstart: warning: {where}/empty.json: empty file; file skipped",
        f"otel-coldstart: warning: {where}/fifo.jsonl: not a regular file (a device, FIFO or socket); save the "
        "trace to a file; file skipped",
        "otel-coldstart: warning: 3 files together: 2 span(s) point at a parent that is not in the input"]
    assert _nobody_reads(str(tmp_path / "fifo.jsonl"))


def _read(path: str):
    result = read_trace(path)
    return [(s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, dict(s.attributes),
             dict(s.resource), s.status, s.events) for s in result.spans], result.format, result.warnings


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.dirname(data_file("demo-warm.otlp.jsonl")))))
def test_a_file_read_whole_gives_what_it_gives_streamed(name, monkeypatch):
    path = data_file(name)
    try:
        whole = _read(path)
    except readers.TraceReadError as exc:
        whole = str(exc)
    monkeypatch.setattr(readers, "READ_BUFFER", 0)  # every file is bigger than that: streamed
    try:
        streamed = _read(path)
    except readers.TraceReadError as exc:
        streamed = str(exc)
    assert whole == streamed


def _lines_with_a_bad_one(tmp_path):
    path = tmp_path / "t.otlp.jsonl"
    lines = open(data_file("demo-two-ranks.otlp.jsonl"), "rb").read().splitlines(keepends=True)
    path.write_bytes(b"\xef\xbb\xbf" + lines[0] + b"\n" + b'{"resourceSpans": [\n' + b"".join(lines[1:]))
    return str(path)


@pytest.mark.parametrize("change", [-4096, -1, 1, 4096])
def test_a_file_that_changes_size_while_read_is_read_to_its_end(tmp_path, monkeypatch, change):
    """The size the open found is not where the reading stops: a file that grew after it was
    looked at (its size said smaller than it is) is read on past it, one that shrank (said
    bigger) to where it ends. Simulated by a stat that says the size was ``change`` bytes
    off, the real race being too quick to catch."""
    path = _lines_with_a_bad_one(tmp_path)
    expected = _read(path)
    real_fstat = os.fstat

    def fstat_before_the_change(fd):
        found = real_fstat(fd)
        return os.stat_result((found.st_mode, found.st_ino, found.st_dev, found.st_nlink, found.st_uid,
                               found.st_gid, max(0, found.st_size - change), found.st_atime, found.st_mtime,
                               found.st_ctime))

    monkeypatch.setattr(readers.os, "fstat", fstat_before_the_change)
    assert _read(path) == expected
    spans, form, warnings = expected
    assert len(spans) == 20 and form == "otlp-lines"
    assert warnings[0] == "line 3 is truncated JSON (Expecting value) skipped"  # the lines numbered as in the file


def test_compare_says_a_problems_before_b_is_looked_at(tmp_path, capsys):
    no_startup = data_file("trace.json")  # a trace, but no model.startup in it
    assert main(["compare", no_startup, str(tmp_path / "missing")]) == 5
    err = capsys.readouterr().err
    assert "no model.startup span" in err and "missing" not in err
    assert main(["compare", data_file("demo-warm.otlp.jsonl"), str(tmp_path / "missing")]) == 3
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'missing'}: no such file")
