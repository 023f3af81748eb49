"""The ending matrix (issue 21.3): every way a start-up ends, on every loader path, with the
checkpoint evicted or resident, ended during the read or in a later phase; each case a real
process ended for real (ready(), a normal exit, an uncaught exception, or SIGTERM, SIGINT,
SIGKILL sent from here), then read back as ``analyze`` reads it.

The processes are forked from a server that imported torch, safetensors and transformers
once (ending_zygote.py): 120 interpreter starts with torch would not fit the suite. A case
lands "during the read" deterministically: host code (a profile hook on the reading thread)
runs at the loader's own reading call, the last file's, and holds there.

Every report must have: one start-up with the right end reason; the phase that was running
named; phases + unattributed = the start-up, and (single-threaded) busy <= 1.02 x wall; every
finished shard listed with its cache state and, for an evicted file, >= 80% of it read from
storage; each finished shard's span inside the read's own times (the host's clock around the
call). On main before this change, load_file/safe_open shards were stretched to the end of
the process by any ending but ready(), and SIGKILL lost them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from _forkserver import ServerLink
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace

pytestmark = [pytest.mark.process, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
ZYGOTE = os.path.join(HERE, "ending_zygote.py")

ENDINGS = ["ready", "exit", "exception", "sigterm", "sigint", "sigkill"]
LOADERS = ["load_file", "safe_open", "torch_load", "torch_load_mmap", "from_pretrained"]
CACHES = ["evicted", "resident"]
WHENS = ["during", "later"]
SIGNALS = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT, "sigkill": signal.SIGKILL}
EXIT_CODES = {"ready": 0, "exit": 0, "exception": 1, "sigterm": -signal.SIGTERM, "sigint": -signal.SIGINT,
              "sigkill": -signal.SIGKILL}
END_REASONS = {"ready": semconv.END_READY, "exit": semconv.END_EXIT, "exception": semconv.END_EXCEPTION,
               "sigterm": semconv.END_SIGTERM, "sigint": semconv.END_EXCEPTION, "sigkill": semconv.END_KILLED}


class Zygote(ServerLink):
    def __init__(self, workdir: str) -> None:
        env = dict(os.environ)
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT",
                     "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
            env.pop(name, None)
        super().__init__(ZYGOTE, workdir, env, "zygote.err")

    def start(self, case: dict) -> int:
        self.send(case)
        with self.changed:
            assert self.changed.wait_for(lambda: case["id"] in self.pids, timeout=60)
            return self.pids[case["id"]]

    def wait(self, pid: int, case_dir, timeout: float = 90) -> int:
        with self.changed:
            if self.changed.wait_for(lambda: pid in self.exits, timeout=timeout):
                return self.exits[pid]
        # Hung: its stacks into the failure (faulthandler on SIGUSR1), and kill it, so that its
        # mappings do not keep the next cases' files in the page cache.
        for sent in (signal.SIGUSR1, signal.SIGKILL):
            try:
                os.kill(pid, sent)
            except ProcessLookupError:  # it ended after all, just past the wait: say so below
                break
            time.sleep(1.0 if sent == signal.SIGUSR1 else 0)
        stacks = (case_dir / "stderr.txt").read_text()[-6000:]
        raise AssertionError(f"child {pid} did not end within {timeout} s; its threads:\n{stacks}")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    server = Zygote(str(tmp_path_factory.mktemp("zygote")))
    yield server
    server.close()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Per loader, the files it reads (two shards where the loader reads files one by one),
    in a directory of this worker's own (cache states are set per case)."""
    import safetensors.torch
    import torch

    root = tmp_path_factory.mktemp("matrix-checkpoints")
    generator = torch.Generator().manual_seed(0)

    def tensors(tag):
        return {f"{tag}.w{i}": torch.randn(1 << 19, generator=generator) for i in range(4)}  # 8 MiB

    shards = [str(root / f"model-0000{i + 1}-of-00002.safetensors") for i in range(2)]
    for i, path in enumerate(shards):
        safetensors.torch.save_file(tensors(f"s{i}"), path)
    pickles = [str(root / f"pytorch_model-0000{i + 1}-of-00002.bin") for i in range(2)]
    for i, path in enumerate(pickles):
        torch.save(tensors(f"p{i}"), path)
    # A small generated BERT (the real all-MiniLM-L6-v2 is tests/storage/test_storage_transformers.py's):
    # transformers' real from_pretrained path, at a size that keeps 24 cases quick.
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=8192, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=512, max_position_embeddings=128)
    model = root / "small-bert"
    transformers.BertModel(config).save_pretrained(str(model))
    return {"load_file": shards, "safe_open": shards, "torch_load": pickles, "torch_load_mmap": pickles,
            "from_pretrained": [str(model)]}


def _weights(loader: str, files: list[str]) -> list[str]:
    return [os.path.join(files[0], "model.safetensors")] if loader == "from_pretrained" else files


def _set_cache(paths: list[str], state: str) -> None:
    from otel_coldstart import probes

    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
        if state == "evicted":
            assert probes.evict_from_page_cache(path), path
            ratio = probes.resident_ratio(path)
            assert ratio is None or ratio <= 0.02, f"{path}: {ratio:.0%} still cached (mapped by a process?)"


def _wait_for(path: str, pid: int, zygote: Zygote, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert pid not in zygote.exits, f"the case ended before reaching {os.path.basename(path)}"
        assert time.monotonic() < deadline, f"the case never reached {os.path.basename(path)}"
        time.sleep(0.01)


def _recorded(case_dir, phase: str) -> bool:
    """A progress record naming ``phase`` is in the trace file: what a SIGKILL leaves from now
    on names it, with the storage figures settled so far (the same flush carries them)."""
    for path in (case_dir / "traces").glob("startup-*.otlp.jsonl"):
        for line in path.read_text().splitlines():
            if '"coldstart.progress"' not in line or f'"stringValue":"{phase}"' not in line:
                continue
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        attrs = {a["key"]: a["value"].get("stringValue") for a in span.get("attributes", [])}
                        if span["name"] == semconv.SPAN_PROGRESS and attrs.get(semconv.PROGRESS_PHASE) == phase:
                            return True
    return False


def _run_case(zygote, checkpoints, tmp_path, ending, loader, cache, when):
    files = checkpoints[loader]
    weights = _weights(loader, files)
    _set_cache(weights, cache)
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    case = {"id": f"{ending}-{loader}-{cache}-{when}-{time.monotonic_ns()}", "dir": str(case_dir),
            "ending": ending, "loader": loader, "when": when, "files": files,
            # transformers loads on the calling thread (no materialisation pool): one thread.
            "env": {"OTEL_COLDSTART_OUTPUT_DIR": str(case_dir / "traces"), "OTEL_COLDSTART_SUMMARY": "0",
                    "HF_DEACTIVATE_ASYNC_LOAD": "1"}}
    pid = zygote.start(case)
    if ending in SIGNALS:
        _wait_for(str(case_dir / f"HOLD-{when}"), pid, zygote)
        if ending == "sigkill":
            # Deterministic on a loaded machine: kill once a record naming where we are is on
            # disk (a record follows a change within 0.25 s on a quiet one).
            phase = semconv.PHASE_DESERIALIZE if when == "during" else "warmup"
            deadline = time.monotonic() + 60
            while not _recorded(case_dir, phase) and time.monotonic() < deadline:
                time.sleep(0.05)
        os.kill(pid, SIGNALS[ending])
    code = zygote.wait(pid, case_dir)
    return case_dir, weights, code


@pytest.mark.parametrize("when", WHENS)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("loader", LOADERS)
# `make test` runs the matrix as two groups, on both workers (a fork server each): the endings
# the child reaches itself and the signals sent from here.
@pytest.mark.parametrize("ending", [pytest.param(ending, marks=pytest.mark.xdist_group(
    f"ending-matrix-{'signals' if ending in SIGNALS else 'own'}")) for ending in ENDINGS])
def test_every_ending_leaves_a_true_report(zygote, checkpoints, tmp_path, ending, loader, cache, when):
    if sys.version_info < (3, 11) and loader in ("torch_load", "torch_load_mmap") and when == "during":
        # The harness stops the host inside torch's C read by its profile hook's c_call for
        # PyTorchFileReader.get_record: 3.10 emits none for pybind11 methods (and has no
        # sys.monitoring), so the case could never reach "during". The other 96 cases run here.
        pytest.skip("3.10's profile hook sees no c_call for pybind11's get_record: no 'during' point to stop at")
    case_dir, weights, code = _run_case(zygote, checkpoints, tmp_path, ending, loader, cache, when)
    stderr = (case_dir / "stderr.txt").read_text()
    assert code == EXIT_CODES[ending], stderr[-3000:]
    assert "internal error" not in stderr, stderr[-3000:]
    (trace,) = list((case_dir / "traces").glob("startup-*.otlp.jsonl"))
    result = read_trace(str(trace))
    (startup,) = breakdowns(result.spans)
    root = startup.root

    # How it ended, and the phase that was running then.
    assert startup.end_reason == END_REASONS[ending], root.attributes
    if ending == "sigint":
        assert root.attributes[semconv.END_EXCEPTION_TYPE] == "KeyboardInterrupt"
    if ending != "ready":
        expected_phase = semconv.PHASE_DESERIALIZE if when == "during" else "warmup"
        assert root.attributes.get(semconv.END_PHASE) == expected_phase, root.attributes

    # Phases + unattributed = the start-up; one thread's work is never more than its wall time.
    duration = startup.duration_ns
    assert abs(sum(p.busy_ns for p in startup.phases) + startup.unattributed_ns - duration) <= 0.02 * duration
    assert startup.total_busy_ns <= 1.02 * duration, (startup.total_busy_ns, duration)

    # Every finished shard: listed, with its cache state, the storage figure, the read's own times.
    reads = [json.loads(line) for line in (case_dir / "reads.jsonl").read_text().splitlines()]
    finished = {os.path.realpath(r["path"]) for r in reads}
    file_spans = [s for s in result.spans if s.phase == semconv.PHASE_DESERIALIZE]
    for path in weights:
        read = next((r for r in reads if os.path.realpath(_weights(loader, [r["path"]])[0]) == os.path.realpath(path)),
                    None)
        spans = [s for s in file_spans if os.path.realpath(str(s.attributes.get(semconv.FILE_PATH))) ==
                 os.path.realpath(path)]
        if read is None:  # the read the case ended in
            if ending in ("sigterm", "sigkill") and when == "during":
                (span,) = spans
                assert span.attributes.get(semconv.INTERRUPTED) is True
            if ending in ("exception", "sigint", "exit") and when == "during":
                (span,) = spans
                assert span.status == "error" and semconv.ERROR_TYPE in span.attributes, span.attributes
            continue
        (span,) = spans
        assert read["start_ns"] <= span.start_ns and span.end_ns <= read["end_ns"], (read, span)
        assert semconv.INTERRUPTED not in span.attributes and span.status != "error"
        if span.end_ns > root.end_ns:  # ready() came during this read: it ends after the start-up
            assert ending == "ready" and when == "during"
            continue
        shard = next(s for s in startup.shards if os.path.realpath(str(s.path)) == os.path.realpath(path))
        assert shard.state == ("cold" if cache == "evicted" else "warm"), span.attributes
        size = os.path.getsize(path)
        if cache == "evicted":
            assert shard.read_bytes is not None and shard.read_bytes >= 0.8 * size, span.attributes
    assert finished or (when == "during" and len(weights) == 1)  # a read finished before the end
