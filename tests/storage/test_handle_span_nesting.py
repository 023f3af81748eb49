"""Work inside a ``with safe_open(...)`` block before its first read nests under the handle's
span, in a fresh process as a loader runs it.

The handle's span is made at its first read and starts when the handle was opened (its header
read is the file's). A span of ours started in between (an import the with-block runs first)
hung beside it under the with-block's parent while lying inside it in time: its time was counted
in both phases, and the phases summed to more than the start-up. (CI's ending matrix found the
same double count in transformers 5's loader, whose handles have no with-block and which this
does not mend: docs/decisions.md, "A `with safe_open` handle's span is made before ...".)
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace

pytestmark = pytest.mark.process

torch = pytest.importorskip("torch")

HOST = r"""
import sys
import otel_coldstart
otel_coldstart.instrument(summary=False, output_dir=sys.argv[1])
import torch
from safetensors import safe_open

sys.path.insert(0, sys.argv[3])
with otel_coldstart.phase("load"):
    with safe_open(sys.argv[2], framework="pt") as handle:
        import imported_in_the_block  # before the first read: a module that takes 0.2 s to import
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
otel_coldstart.ready()
"""


def test_an_import_before_the_first_read_nests_under_the_handle_and_is_counted_once(tmp_path):
    from safetensors.torch import save_file

    weights = tmp_path / "model.safetensors"
    save_file({f"layer{i}": torch.ones(256, 256) for i in range(8)}, str(weights))
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "imported_in_the_block.py").write_text("import time\ntime.sleep(0.2)\n")
    traces = tmp_path / "traces"
    done = subprocess.run([sys.executable, "-c", HOST, str(traces), str(weights), str(modules)],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
    assert done.returncode == 0, done.stderr[-3000:]
    (trace,) = glob.glob(str(traces / "*.jsonl"))
    spans = read_trace(trace).spans
    (read,) = [s for s in spans if s.phase == semconv.PHASE_DESERIALIZE]
    (block_import,) = [s for s in spans if s.phase == semconv.PHASE_IMPORT
                       and "imported_in_the_block" in str(s.attributes.get(semconv.IMPORT_HEAVIEST))]
    assert read.start_ns <= block_import.start_ns and block_import.end_ns <= read.end_ns  # inside it in time
    assert block_import.parent_id == read.span_id  # and in the tree

    (startup,) = breakdowns(spans)
    deserialize = startup.phase(semconv.PHASE_DESERIALIZE)
    assert deserialize is not None and deserialize.busy_ns <= read.duration_ns - block_import.busy_ns
    # Each moment of the host's thread in one phase: the phases and the rest add up to the start-up.
    counted = sum(p.busy_ns for p in startup.phases) + startup.unattributed_ns
    assert abs(counted - startup.duration_ns) <= 0.01 * startup.duration_ns, (counted, startup.duration_ns)
