"""``otel-coldstart floor``: real files, the real CLI entry point, no timing assertions."""

from __future__ import annotations

import json
import os
import re

import pytest

from otel_coldstart import floor
from otel_coldstart.cli import main


@pytest.fixture
def shards(tmp_path):
    """Two files whose sizes are not multiples of the block size, in a checkpoint directory."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    sizes = [3 * 4096 + 17, 70_001]
    for number, size in enumerate(sizes):
        (directory / f"model-{number}.safetensors").write_bytes(os.urandom(size))
    return directory, sizes


def test_read_files_reads_every_byte(shards):
    directory, sizes = shards
    paths = sorted(str(p) for p in directory.iterdir())
    total, seconds = floor.read_files(paths, block_size=4096)
    assert total == sum(sizes)
    assert seconds > 0


def test_directory_stands_for_its_files(shards):
    directory, sizes = shards
    files = floor.collect_files([str(directory)])
    assert [os.path.basename(p) for p, _ in files] == ["model-0.safetensors", "model-1.safetensors"]
    assert [size for _, size in files] == sizes
    assert all(os.path.isabs(p) for p, _ in files)


def test_measure_alternates_states_and_reports_medians(shards):
    directory, sizes = shards
    result = floor.measure([str(directory)], repeats=3, block_size=8192)
    assert list(result.states) == ["cold", "warm"]
    for state in ("cold", "warm"):
        assert len(result.states[state].seconds) == 3
        assert result.bytes_per_s(state) == pytest.approx(sum(sizes) / result.states[state].median_seconds())
    cold = result.states["cold"]
    assert len(cold.resident_after_evict) == 3
    assert all(r is None or 0.0 <= r <= 1.0 for r in cold.resident_after_evict)


def test_json_output_is_the_documented_document(shards, capsys):
    directory, sizes = shards
    assert main(["floor", str(directory), "--json", "--repeat", "2"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "otel-coldstart.floor" and document["version"] == 1
    assert document["total_bytes"] == sum(sizes)
    assert [f["bytes"] for f in document["files"]] == sizes
    for state in ("cold", "warm"):
        assert document[state]["runs"] == 2 and len(document[state]["seconds"]) == 2
        assert document[state]["bytes_per_s"] > 0
    assert isinstance(document["cold"]["evicted"], bool)


def test_text_output_and_only(shards, capsys):
    directory, _ = shards
    assert main(["floor", str(directory), "--only", "warm", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "read(2) floor: 2 file(s)" in out
    assert "warm" in out and "cold" not in out


def test_output_file_is_written_once_and_never_overwritten(shards, tmp_path, capsys):
    directory, _ = shards
    target = tmp_path / "floor.json"
    assert main(["floor", str(directory), "--repeat", "1", "--output", str(target)]) == 0
    written = target.read_text()
    assert json.loads(written)["format"] == "otel-coldstart.floor"
    capsys.readouterr()
    assert main(["floor", str(directory), "--repeat", "1", "--output", str(target)]) == 6
    err = capsys.readouterr().err
    assert "not overwriting" in err and err.count("\n") == 1
    assert target.read_text() == written


@pytest.mark.parametrize("argv, code", [
    (["floor", "/nonexistent/model.safetensors"], 3),
    (["floor", "{empty}"], 3),
    (["floor", "{file}", "--repeat", "0"], 2),
    (["floor", "{file}", "--block-size", "100"], 2),
])
def test_bad_input_is_one_line_and_a_documented_code(argv, code, tmp_path, capsys):
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 10_000)
    argv = [a.format(empty=empty, file=data) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err


# --- issue 39 item 14: tmpfs has no storage behind it ---------------------------------------

SHM = "/dev/shm"


@pytest.fixture
def in_memory(tmp_path):
    """A file on tmpfs (/dev/shm, as an emptyDir with medium: Memory is) and one on the disk."""
    if not os.path.isdir(SHM) or floor.memory_backed(SHM) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    on_tmpfs = os.path.join(SHM, f"otel-coldstart-floor-{os.getpid()}.bin")
    with open(on_tmpfs, "wb") as handle:
        handle.write(os.urandom(300_000))
    on_disk = tmp_path / "disk.bin"
    on_disk.write_bytes(os.urandom(300_000))
    try:
        yield on_tmpfs, str(on_disk)
    finally:
        os.unlink(on_tmpfs)


def test_memory_backed_is_told_by_statfs_and_agrees_with_mountinfo(in_memory):
    on_tmpfs, on_disk = in_memory
    assert floor._statfs_type(on_tmpfs) == 0x01021994  # TMPFS_MAGIC, from the kernel
    assert floor.memory_backed(on_tmpfs) == "tmpfs" and floor.memory_backed(on_disk) is None
    from otel_coldstart import probes
    assert probes.filesystem_type(on_tmpfs) == "tmpfs"  # the fallback names the same filesystem


def test_floor_on_tmpfs_says_there_is_no_storage_instead_of_a_cold_rate(in_memory, capsys):
    on_tmpfs, on_disk = in_memory
    assert main(["floor", on_tmpfs, "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    (cold,) = [line for line in out.splitlines() if line.strip().startswith("cold")]
    assert "no storage behind it" in cold and "tmpfs" in cold and "/s" not in cold  # main: "cold  3.2 GB/s"
    assert main(["floor", on_tmpfs, "--repeat", "1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cold"]["bytes_per_s"] is None and document["cold"]["runs"] == 0
    assert document["memory_backed"] == [{"path": on_tmpfs, "filesystem": "tmpfs"}]
    assert document["warm"]["bytes_per_s"] > 0
    from otel_coldstart.analyze.storage_floor import floor_from_document
    assert floor_from_document(document, "f").cold_bytes_per_s is None  # no cold reference for findings
    # one file on the disk beside it: both timed, the tmpfs one named
    assert main(["floor", on_tmpfs, on_disk, "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 file(s) are on tmpfs" in out and re.search(r"cold\s+[\d.]+ [kMG]?B/s", out)
