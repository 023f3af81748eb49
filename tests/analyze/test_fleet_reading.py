"""Issue 25.7: fleet-sized inputs are analysed trace by trace (analyze/assemble.py), and read
by several processes at once for compare and capacity (--jobs). Whatever the layout (one file
per start-up, one Collector file, a trace split over files or over the chunks of a long
file), the report is exactly the one reading everything at once gives. The speed and memory
figures are benchmarks/fleet_scale.py's (RESULTS-analyzer.md); here only the answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from otel_coldstart.analyze import assemble
from otel_coldstart.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import fleet_scale  # noqa: E402

sys.path.pop(0)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet")
    fleet_scale.generate(str(directory), 120)
    return directory


def _json(capsys, *argv) -> dict:
    code = main([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    return json.loads(out)


@pytest.mark.process
def test_every_layout_and_any_number_of_processes_gives_the_same_capacity(fleet, capsys):
    files = [str(fleet / "a"), str(fleet / "b")]
    reference = _json(capsys, "capacity", *files, "--jobs", "1")
    all_startups = reference["groups"][0]
    assert all_startups["startups"] == 120 and all_startups["not_ready"] == 120 - all_startups["ready"] > 0
    for argv in ([*files, "--jobs", "2"], [*files, "--jobs", "3"], [str(fleet / "all.jsonl"), "--jobs", "1"],
                 [str(fleet / "all.jsonl"), "--jobs", "2"], [str(fleet / "all.jsonl"), "--jobs", "3"],
                 [str(fleet / "a.jsonl"), str(fleet / "b.jsonl"), "--jobs", "2"]):
        document = _json(capsys, "capacity", *argv)
        assert document["groups"] == reference["groups"], argv


@pytest.mark.process
def test_compare_is_the_same_read_in_one_process_or_several(fleet, capsys):
    sequential = _json(capsys, "compare", str(fleet / "a.jsonl"), str(fleet / "b.jsonl"), "--jobs", "1")
    parallel = _json(capsys, "compare", str(fleet / "a.jsonl"), str(fleet / "b.jsonl"), "--jobs", "2")
    per_file = _json(capsys, "compare", str(fleet / "a"), str(fleet / "b"), "--jobs", "2")
    # Both sides' shares among three processes at once: two forks take one of each side's
    # shares, whichever comes next (cli/_inputs.load_sides).
    three = [_json(capsys, "compare", str(fleet / a), str(fleet / b), "--jobs", "3")
             for a, b in (("a", "b"), ("a.jsonl", "b.jsonl"))]
    for document in (parallel, per_file, *three):
        assert document["rows"] == sequential["rows"] and document["counted"] == sequential["counted"]
        assert document["a"]["cache"] == sequential["a"]["cache"]
        assert document["b"]["not_ready_reasons"] == sequential["b"]["not_ready_reasons"]


def _split_trace_files(tmp_path):
    """One start-up whose root and phases are in one file and whose shards are in another
    (a torchrun rank and its launcher, a Collector rotating files), among others."""
    resource, spans = fleet_scale.startup(0, fleet_scale.random.Random(3))
    shards = [s for s in spans if s["name"] in ("coldstart.deserialize", "coldstart.h2d", "coldstart.cast")]
    rest = [s for s in spans if s not in shards]
    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "1-root.jsonl").write_text(fleet_scale._line(resource, rest))
    others = [fleet_scale.startup(n, fleet_scale.random.Random(n)) for n in range(1, 6)]
    (tmp_path / "split" / "2-others.jsonl").write_text("".join(fleet_scale._line(r, s) for r, s in others))
    (tmp_path / "split" / "3-shards.jsonl").write_text(fleet_scale._line(resource, shards))
    return str(tmp_path / "split")


@pytest.mark.process
def test_a_trace_split_over_files_read_by_different_processes_is_put_together(tmp_path, capsys):
    directory = _split_trace_files(tmp_path)
    one = _json(capsys, "capacity", directory, "--jobs", "1")
    several = _json(capsys, "capacity", directory, "--jobs", "3")
    assert several["groups"] == one["groups"]
    deserialize = one["groups"][0]["phases"]["deserialize"]
    assert deserialize["p50_s"] > 0  # the split start-up's shards are in its breakdown
    code = main(["analyze", directory, "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    first = next(s for s in document["startups"] if s["trace_id"].startswith("00000001"))
    assert code in (0, 11) and len(first["shards"]) == 16  # every shard, though read from another file


def test_a_trace_crossing_chunks_of_a_long_file_is_read_again_in_full(fleet, capsys, monkeypatch):
    reference = _json(capsys, "capacity", str(fleet / "all.jsonl"), "--jobs", "1")
    analysed = []
    original = assemble.analyse_trace
    monkeypatch.setattr(assemble, "CHUNK_SPANS", 97)  # a chunk closes inside almost every start-up
    monkeypatch.setattr(assemble, "RECENT_BATCHES", 1)  # and the traces still being read are analysed too
    monkeypatch.setattr("otel_coldstart.cli._inputs.analyse_trace",
                        lambda spans, slim=False: analysed.append(len(spans)) or original(spans, slim))
    small_chunks = _json(capsys, "capacity", str(fleet / "all.jsonl"), "--jobs", "1")
    assert small_chunks["groups"] == reference["groups"]
    assert len(analysed) > 120  # traces were analysed from a part, then again from all their spans


@pytest.mark.process  # the benchmark runs the CLI in processes of its own
def test_fleet_benchmark_smoke_runs_and_reports(tmp_path):
    out = tmp_path / "fleet.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "fleet_scale.py"), "--smoke",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["startups"] == 200 and results["spans"] > 200 * 40
    assert len(results["runs"]) == 4
    for run in results["runs"]:
        assert run["exit"] == 0 and run["wall_s"] > 0 and run["peak_rss_mib"] > 10
