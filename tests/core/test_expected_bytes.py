"""Expected checkpoint bytes (issue 21.5): from the checkpoint's index where one exists (its
total_size, else the files it names), otherwise the files opened so far, and the report says
which. On main before this change, three of four .bin shards loaded read "90.0 MiB of
90.0 MiB (100%)": the files seen were taken for the checkpoint."""

from __future__ import annotations

import io
import json
import os

from otel_coldstart import inflight, semconv
from otel_coldstart.analyze.interrupted import Killed
from otel_coldstart.analyze.render_interrupted import _killed


def _write(path, size):
    with open(path, "wb") as handle:
        handle.write(b"\0" * size)


def test_the_index_total_size_is_the_checkpoint(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 4000},
                                                                       "weight_map": {"a": "x.safetensors"}}))
    assert inflight.index_expected_bytes(str(tmp_path)) == 4000


def test_an_index_without_total_size_counts_the_files_it_names(tmp_path):
    for name, size in (("m-1.bin", 100), ("m-2.bin", 200), ("m-3.bin", 300)):
        _write(tmp_path / name, size)
    weight_map = {"a": "m-1.bin", "b": "m-2.bin", "c": "m-3.bin", "d": "m-3.bin"}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert inflight.index_expected_bytes(str(tmp_path)) == 600


def test_without_an_index_the_files_opened_so_far_and_the_report_says_so(tmp_path):
    class Session:
        start_ns = 0
        root_attributes: dict = {}

    board = inflight.ProgressBoard(Session())
    board._sizes = {str(tmp_path / "a.bin"): 30, str(tmp_path / "b.bin"): 30}
    expected, source = board._expected(board._sizes)
    assert (expected, source) == (60, semconv.EXPECTED_FROM_FILES_OPENED)
    out = io.StringIO()
    _killed(Killed(1_000_000_000, "deserialize", None, (), 60, 60, source), out)
    assert "checkpoint bytes loaded: 60 B of 60 B (100% of the files opened so far)" in out.getvalue()


def test_with_an_index_the_report_says_it_is_the_whole(tmp_path):
    out = io.StringIO()
    _killed(Killed(1_000_000_000, "deserialize", None, (), 30, 60, semconv.EXPECTED_FROM_INDEX), out)
    assert "30 B of 60 B (50%, per the checkpoint's index)" in out.getvalue()
    assert os.path.isdir(tmp_path)
