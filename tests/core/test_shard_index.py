"""coldstart.shard.index as docs/conventions.md defines it: from the HF index or the shard
name, else the file's position among every checkpoint file the start-up read. A `.bin` read
after three shards is #3, not a second #0."""

from __future__ import annotations

import io

import torch
from safetensors.torch import load_file

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.render import render_startup_text


def test_a_file_without_index_or_shard_name_gets_its_place_among_all_files(traced, small_checkpoint, tmp_path):
    extra = tmp_path / "adapter.bin"
    torch.save({"lora": torch.ones(4, 4)}, str(extra))
    other = tmp_path / "head.bin"
    torch.save({"head": torch.ones(2, 2)}, str(other))

    for path in small_checkpoint:
        load_file(path)
    torch.load(str(extra), weights_only=True)  # fifth file read: no index, no shard name
    torch.load(str(other), weights_only=True)  # sixth
    torch.load(str(extra), weights_only=True)  # read again: the same place
    records = traced.records()
    import otel_coldstart

    otel_coldstart.ready()

    files = [(s.attributes[semconv.FILE_PATH], s.attributes[semconv.SHARD_INDEX])
             for s in traced.by_phase(semconv.PHASE_DESERIALIZE)]
    assert files == [(small_checkpoint[0], 0), (small_checkpoint[1], 1), (small_checkpoint[2], 2),
                     (small_checkpoint[3], 3), (str(extra), 4), (str(other), 5), (str(extra), 4)]
    # The named shards keep their index and count; the others carry no count.
    counts = {s.attributes[semconv.FILE_PATH]: s.attributes.get(semconv.SHARD_COUNT)
              for s in traced.by_phase(semconv.PHASE_DESERIALIZE)}
    assert counts[small_checkpoint[0]] == 4 and counts[str(extra)] is None
    assert records  # the session's records were read before ready()


def test_the_table_never_shows_two_first_shards(traced, small_checkpoint, tmp_path):
    extra = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(8)}, str(extra))
    for path in small_checkpoint[:3]:
        load_file(path)
    torch.load(str(extra), weights_only=True)
    import otel_coldstart

    otel_coldstart.ready()
    (breakdown,) = breakdowns(traced.records())
    out = io.StringIO()
    render_startup_text(breakdown, out)
    rows = [line.split()[0] for line in out.getvalue().splitlines() if line.startswith("    #")]
    assert rows == ["#0", "#1", "#2", "#3"]
