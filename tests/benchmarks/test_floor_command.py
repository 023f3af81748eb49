"""``otel-coldstart floor``: real files, the real CLI entry point, no timing assertions."""

from __future__ import annotations

import json
import os

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
