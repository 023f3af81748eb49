"""A real 2-rank torch.distributed start on CPU (gloo, loopback) is one trace: the launcher's
span reaches every rank through TRACEPARENT; each rank's root carries its rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
import torch.distributed  # noqa: E402

from framework_checks import EXAMPLES, assert_no_orphans, attrs, by_phase, clean_env, free_port, read_trace_dir  # noqa: E402
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.demo import LlamaShape, generate_checkpoint  # noqa: E402
from otel_coldstart.launch import Launch, child_env  # noqa: E402
from otel_coldstart.startup import rank_attributes  # noqa: E402

pytestmark = [pytest.mark.process, pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="this torch build has no gloo backend")]

WORLD_SIZE = 2


def test_two_ranks_one_trace(tmp_path, monkeypatch):
    checkpoint = str(tmp_path / "ckpt")
    generate_checkpoint(checkpoint, LlamaShape(vocab=512, hidden=64, intermediate=128, layers=2, shards=4))
    traces = str(tmp_path / "traces")
    for name in list(os.environ):
        if name.startswith("OTEL_") or name.lower() in ("traceparent", "tracestate"):
            monkeypatch.delenv(name)
    init_method = f"tcp://127.0.0.1:{free_port()}"
    with Launch("launch test", output_dir=traces) as launched:
        # Ranks get LOCAL_RANK from the environment but their rank and world size only as
        # arguments: coldstart.rank must come from torch.distributed itself.
        ranks = [
            subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "multiprocess_rank.py"), checkpoint, str(r),
                              str(WORLD_SIZE), init_method],
                             env={**clean_env(**launched.env(base={}, local_rank=r)),
                                  "OTEL_COLDSTART_OUTPUT_DIR": traces, "OTEL_COLDSTART_SUMMARY": "0"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(WORLD_SIZE)
        ]
        outputs = [rank.communicate(timeout=600) for rank in ranks]
    for rank, (_, err) in zip(ranks, outputs):
        assert rank.returncode == 0, err[-3000:]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert {r["rank"] for r in reports} == {0, 1}

    spans = read_trace_dir(traces)
    assert len({s.trace_id for s in spans}) == 1, "every process's spans share the launcher's trace"
    launch_spans = [s for s in spans if s.name == "launch test"]
    assert len(launch_spans) == 1 and launch_spans[0].parent_id is None
    roots = [s for s in spans if s.is_root]
    assert len(roots) == WORLD_SIZE
    assert {r.parent_id for r in roots} == {launch_spans[0].span_id}
    assert sorted((r.attributes[semconv.RANK], r.attributes[semconv.LOCAL_RANK]) for r in roots) == [(0, 0), (1, 1)]
    assert {r.attributes[semconv.WORLD_SIZE] for r in roots} == {WORLD_SIZE}
    assert all(r.attributes[semconv.READY] is True for r in roots)
    assert_no_orphans(spans)

    # Each rank's shard spans belong to that rank's process and root.
    for root in roots:
        pid = root.resource["process.pid"]
        files = sorted(os.path.basename(attrs(s)[semconv.FILE_PATH]) for s in by_phase(spans, semconv.PHASE_DESERIALIZE)
                       if s.resource["process.pid"] == pid)
        report = next(r for r in reports if r["rank"] == root.attributes[semconv.RANK])
        assert files == report["shards"]


def test_rank_from_launcher_variables(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert not torch.distributed.is_initialized()
    assert rank_attributes() == {semconv.RANK: 3, semconv.WORLD_SIZE: 8, semconv.LOCAL_RANK: 1}
    monkeypatch.setenv("RANK", "5")  # torchrun's spelling is preferred
    assert rank_attributes()[semconv.RANK] == 5


def test_child_env_replaces_inherited_context():
    base = {"PATH": "/bin", "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "TRACESTATE": "old=1"}
    with Launch("t", tracer_provider=_in_memory_provider()) as launched:
        env = launched.env(base=base, rank=1, world_size=2)
    assert "traceparent" not in env and "TRACESTATE" not in env
    assert env["TRACEPARENT"] == launched.traceparent
    assert env["PATH"] == "/bin" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert child_env(base={})  == {}  # no current span: nothing to pass on


def _in_memory_provider():
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


def test_otel_coldstart_run_torchrun_is_one_trace_of_the_ranks(tmp_path):
    """``otel-coldstart run -- torchrun ...``: the ranks are instrumented, torchrun itself is
    not (it loads nothing), and the run's launch span is the parent of both ranks."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed beside this Python")
    checkpoint = str(tmp_path / "ckpt")
    generate_checkpoint(checkpoint, LlamaShape(vocab=512, hidden=64, intermediate=128, layers=2, shards=2))
    traces = str(tmp_path / "traces")
    result = subprocess.run(
        [sys.executable, "-m", "otel_coldstart", "run", "--output-dir", traces, "--", torchrun, "--standalone",
         f"--nproc-per-node={WORLD_SIZE}", os.path.join(EXAMPLES, "multiprocess_rank.py"), checkpoint],
        env=clean_env(OTEL_COLDSTART_SUMMARY="0"), cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    spans = read_trace_dir(traces)
    launch = [s for s in spans if s.name == semconv.SPAN_LAUNCH]
    roots = [s for s in spans if s.is_root]
    assert len(launch) == 1 and len(roots) == WORLD_SIZE
    assert {r.parent_id for r in roots} == {launch[0].span_id}
    assert sorted(r.attributes[semconv.RANK] for r in roots) == [0, 1]
    assert {r.attributes[semconv.LOCAL_RANK] for r in roots} == {0, 1}
    assert len({s.trace_id for s in spans}) == 1
    assert_no_orphans(spans)
