"""What the storage-evidence tests share: a one-file checkpoint, real page-cache states, and a
fresh instrumented process that loads it and writes its trace."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

from otel_coldstart import probes, semconv
from otel_coldstart.analyze.readers import read_trace_file

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "storage_case_child.py")

TAIL_EVICTED = 0.4  # the "last 40% evicted" state


def evict_range(path: str, start: int = 0) -> None:
    """Drop the file's clean pages from ``start`` to its end (dirty ones are written first:
    DONTNEED leaves dirty and mapped pages where they are)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, start, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_whole(path: str) -> None:
    with open(path, "rb") as handle:
        while handle.read(1 << 24):
            pass


def set_state(path: str, state: str) -> float:
    """Put ``path`` in the page-cache state ``evicted``, ``resident`` or ``tail_evicted`` (its
    last 40% evicted) and return the resident share measured afterwards (exactly, whole file).
    Retries a few times: a page another process has mapped, or one under writeback, stays.
    Skips the test, saying why, where the kernel keeps the pages or cannot tell."""
    size = os.path.getsize(path)
    want = {"evicted": (0.0, 0.02), "resident": (0.98, 1.0), "tail_evicted": (0.57, 0.63)}[state]
    ratio = None
    for _attempt in range(5):
        read_whole(path)
        if state == "evicted":
            evict_range(path, 0)
        elif state == "tail_evicted":
            evict_range(path, (int(size * (1 - TAIL_EVICTED)) // 4096) * 4096)
        ratio = probes.resident_ratio(path)
        if ratio is None:
            pytest.skip("this kernel cannot say which pages of the file are cached (no cachestat/mincore answer)")
        if want[0] <= ratio <= want[1]:
            return ratio
        time.sleep(0.2)
    pytest.skip(f"the kernel kept the pages: {ratio:.2f} resident after setting {state}")


def wait_for_the_cache_to_settle(path: str) -> None:
    """POSIX_FADV_DONTNEED leaves pages that read-ahead still has in flight; they arrive a
    moment later (a few pages, later on a busy machine). Wait until two looks agree."""
    last = probes.resident_ratio(path)
    for _ in range(100):
        time.sleep(0.01)
        now = probes.resident_ratio(path)
        if now == last:
            return
        last = now


def run_child(tmp_path, api: str, threads: int, path: str, *, summary: bool = True, timeout: int = 180,
              server=None):
    """A fresh instrumented process that loads ``path`` with ``api``, casts to fp16 on
    ``threads`` intra-op threads and calls ready(). Returns (its trace's spans, stderr, stdout).
    With ``server`` (the ``fork_server`` fixture) the process is forked from one that imported
    torch already: the child still instruments first, but torch is in memory before instrument()."""
    out = tmp_path / f"traces-{api}-{threads}-{time.monotonic_ns()}"
    env = dict(os.environ)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(out)
    env["OTEL_COLDSTART_SUMMARY"] = "1" if summary else "0"
    if server is None:
        completed = subprocess.run([sys.executable, CHILD, api, str(threads), path], env=env, capture_output=True,
                                   text=True, timeout=timeout)
    else:
        completed = server.run([CHILD, api, str(threads), path], env=env, timeout=timeout)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    files = glob.glob(str(out / "startup-*.otlp.jsonl"))
    assert len(files) == 1, files
    return read_trace_file(files[0]), completed.stderr, completed.stdout


def file_span(spans, path: str):
    """The one deserialize span of ``path``."""
    found = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_DESERIALIZE
             and os.path.realpath(str(s.attributes.get(semconv.FILE_PATH))) == os.path.realpath(path)]
    assert len(found) == 1, [s.attributes for s in spans if s.attributes.get(semconv.PHASE) == "deserialize"]
    return found[0]
