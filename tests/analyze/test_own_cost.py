"""The plugin's own cost, measured and shown apart (issue 39 item 1): a start-up of many small
checkpoint files, as a per-layer checkpoint reads, in a fresh process. The report must say how
much of its ``deserialize`` phase is the plugin's own work, never more than the phase, and a
total that adds up from its parts; on main the JSON had no ``own_cost_s`` and the text charged
the plugin's per-file work to the load."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.patches._folded_files import SPANS_FOR_FIRST_SMALL

torch = pytest.importorskip("torch")

FILES = 200

CHILD = r"""
import sys
import otel_coldstart
otel_coldstart.instrument()
from safetensors import safe_open
from safetensors.torch import load_file

paths = sys.argv[1:]
for path in paths[: len(paths) // 2]:
    load_file(path)
for path in paths[len(paths) // 2:]:
    with safe_open(path, framework="pt") as handle:
        for name in handle.keys():
            handle.get_tensor(name)
otel_coldstart.ready()
"""


@pytest.fixture
def small_files(tmp_path):
    from safetensors.torch import save_file

    paths = []
    for number in range(FILES):
        path = str(tmp_path / f"layer-{number:04d}.safetensors")
        save_file({f"layers.{number}.weight": torch.full((1024,), float(number))}, path)
        paths.append(path)
    return paths


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *argv], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.process
def test_own_cost_of_many_small_files_is_shown_apart(tmp_path, small_files):
    traces = tmp_path / "traces"
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(traces), OTEL_COLDSTART_SUMMARY="0")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", CHILD, *small_files], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (trace,) = [str(p) for p in traces.glob("startup-*.otlp.jsonl")]

    shown = _cli("analyze", "--format", "json", trace)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    startup = (document.get("startups") or [document])[0]
    own, parts = startup["own_cost_s"], startup["own_cost"]
    by_phase = parts["by_phase_s"]
    deserialize = next(p for p in startup["phases"] if p["phase"] == semconv.PHASE_DESERIALIZE)
    # Past the first small files, the rest fold into one aggregate per api (_folded_files.py):
    # every file is still counted, once.
    assert deserialize["spans"] == SPANS_FOR_FIRST_SMALL + 2
    assert sum(shard["files"] for shard in startup["shards"]) == FILES
    # The plugin's per-file work lands inside the file spans and aggregates, and is only part
    # of them: the host's own reads are in them too.
    assert 0 < by_phase[semconv.PHASE_DESERIALIZE] < deserialize["busy_s"], (by_phase, deserialize)
    # The whole is its parts: set-up (the import phase's own share), hooks by phase, threads' CPU.
    assert parts["setup_s"] > 0 and by_phase[semconv.PHASE_IMPORT] == pytest.approx(parts["setup_s"])
    assert parts["threads_cpu_s"] >= 0
    hooks = sum(v for k, v in by_phase.items() if k != semconv.PHASE_IMPORT)
    assert own == pytest.approx(parts["setup_s"] + parts["threads_cpu_s"] + hooks, rel=1e-6)
    assert 0 < own < startup["duration_s"]

    text = _cli("analyze", trace)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith(semconv.PHASE_DESERIALIZE))
    assert lines[row + 1].strip().startswith("of which otel-coldstart: "), lines[row:row + 2]
    assert any(line.strip().startswith("otel-coldstart's own cost: ") for line in lines), text.stdout


def test_a_trace_without_own_cost_says_none_and_keeps_the_set_up():
    """An older trace (no ``coldstart.own_cost_s``): no whole figure, the set-up from the
    import span's own share; a hostile value counts as nothing, and the text says nothing."""
    import io

    from otel_coldstart.analyze.own_cost import own_cost_document
    from otel_coldstart.analyze.render import render_startup_text

    from analyze_records import child, only, root, shard

    top = root(1000)
    spans = [top, child(top, "coldstart.import", semconv.PHASE_IMPORT, 0, 400, **{semconv.IMPORT_OWN_S: 0.05}),
             shard(top, 0, 400, 900, 1 << 20, "warm")]
    document = own_cost_document(only(spans))
    assert document["own_cost_s"] is None
    assert document["own_cost"]["setup_s"] == pytest.approx(0.05)

    for hostile in (math.nan, -1.0, "1.0", True):
        top = root(1000, **{semconv.OWN_COST_S: hostile, semconv.OWN_COST_PHASE_PREFIX + "deserialize_s": hostile})
        breakdown = only([top, shard(top, 0, 400, 900, 1 << 20, "warm")])
        document = own_cost_document(breakdown)
        assert document["own_cost_s"] is None and document["own_cost"]["by_phase_s"] == {}, hostile
        out = io.StringIO()
        render_startup_text(breakdown, out)
        assert "otel-coldstart" not in out.getvalue()
