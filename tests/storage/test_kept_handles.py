"""A ``safe_open`` handle kept open after ready() (issue 39 item 7), in a fresh process with the
file evicted from the page cache: servers that load experts or adapters on demand keep the
handle and read tensors through it while serving. ready() must say what of the file is still
on storage, and the reads after it are followed like any mapped file's (first-use records).

On main the handle's span was ended by the end of the start-up after the storage ledger had
stopped taking files: nothing was said at ready(), and the 20 MiB read after it had no record.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file
from storage_cases import file_span, set_state

pytestmark = pytest.mark.process

torch = pytest.importorskip("torch")
MiB = 1 << 20

# 20 "experts" of 2 MiB; the first read before ready(), the last ten after it through the same handle.
SERVER = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
from safetensors import safe_open

handle = safe_open(sys.argv[1], "pt")  # kept for the life of the server, no with-block
names = sorted(handle.keys())
handle.get_tensor(names[0])
otel_coldstart.ready()
time.sleep(0.5)
experts = [handle.get_tensor(name) for name in names[10:]]  # on demand, far from the readahead of the first
print("READ_AFTER", sum(t.nbytes for t in experts), flush=True)
time.sleep(1.5)  # the follow-up samples every 0.25 s
"""


@pytest.fixture
def experts(tmp_path):
    from safetensors.torch import save_file

    path = str(tmp_path / "experts.safetensors")
    save_file({f"expert{j:02d}": torch.randn(512, 1024) for j in range(20)}, path)
    return path


def _serve(tmp_path, server: str, experts: str) -> subprocess.CompletedProcess:
    """Run ``server`` in a fresh process on the evicted ``experts`` file, traces to a file."""
    set_state(experts, "evicted")
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="1")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT",
                 "OTEL_COLDSTART_FIRST_USE_S"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", server, experts], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_reads_through_a_handle_kept_after_ready_are_said_and_followed(tmp_path, experts):
    size = os.path.getsize(experts)
    done = _serve(tmp_path, SERVER, experts)
    read_after = int(next(line for line in done.stdout.splitlines() if line.startswith("READ_AFTER")).split()[1])
    assert read_after == 20 * MiB

    # ready() said what was still on storage.
    (trace,) = glob.glob(str(tmp_path / "traces" / "startup-*.otlp.jsonl"))
    attrs = file_span(read_trace_file(trace), experts).attributes
    unread = attrs[semconv.LAZY_UNREAD_BYTES]
    assert unread >= 0.5 * size, (unread, size)
    assert f"{unread / MiB:.1f} MiB of experts.safetensors not read yet" in done.stderr, done.stderr[-3000:]

    # The reads after it were followed: at least the ten experts, never more than was out.
    first_use = attrs[semconv.FIRST_USE_BYTES]
    assert read_after <= first_use <= unread, (read_after, first_use, unread)
    assert attrs[semconv.CACHE_STORAGE_READ_BYTES] + first_use <= size


# The same server holding the handle inside a with-block across ready() (issue 39 item 7):
# transformers-style code that keeps ``with safe_open(...) as handle:`` open while it serves.
SERVER_IN_WITH = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
from safetensors import safe_open

with safe_open(sys.argv[1], "pt") as handle:  # open for the life of the server
    names = sorted(handle.keys())
    handle.get_tensor(names[0])
    otel_coldstart.ready()
    time.sleep(0.5)
    experts = [handle.get_tensor(name) for name in names[10:]]
    print("READ_AFTER", sum(t.nbytes for t in experts), flush=True)
    time.sleep(1.5)  # the follow-up samples every 0.25 s
print("EXITED", flush=True)
"""


def test_reads_through_a_with_block_handle_kept_across_ready_are_followed(tmp_path, experts):
    size = os.path.getsize(experts)
    done = _serve(tmp_path, SERVER_IN_WITH, experts)
    assert "EXITED" in done.stdout
    read_after = int(next(line for line in done.stdout.splitlines() if line.startswith("READ_AFTER")).split()[1])
    assert read_after == 20 * MiB

    (trace,) = glob.glob(str(tmp_path / "traces" / "startup-*.otlp.jsonl"))
    spans = read_trace_file(trace)
    attrs = file_span(spans, experts).attributes  # one span of the file: the start-up's read
    assert not attrs.get(semconv.AFTER_READY)
    # ready() said what was still on storage, and the storage figure is within the file.
    unread = attrs[semconv.LAZY_UNREAD_BYTES]
    assert unread >= 0.5 * size, (unread, size)
    assert f"{unread / MiB:.1f} MiB of experts.safetensors not read yet" in done.stderr, done.stderr[-3000:]
    assert attrs[semconv.CACHE_STORAGE_READ_BYTES] <= size - unread
    # The reads after it were followed like a mapped file's: at least the ten experts, never
    # more than was out, and never counted as the start-up's storage reads.
    first_use = attrs[semconv.FIRST_USE_BYTES]
    assert read_after <= first_use <= unread, (read_after, first_use, unread)
    assert attrs[semconv.CACHE_STORAGE_READ_BYTES] + first_use <= size
