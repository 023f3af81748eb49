"""Issue 21.6: when the stalled thread waits on a pool or a future, the report also prints
where the work it waited for was: the frames of the worker threads that were in the user's
code (the stall record holds every thread's stack). A real start-up in a fresh process,
stalled on purpose, read back by the CLI."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.process

APP = textwrap.dedent("""
    import queue, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    import otel_coldstart
    otel_coldstart.instrument(start_at="instrument", progress_interval_s=0.2, stall_after_s=1)

    def fetch_shard_from_s3(name):
        # blocked inside the standard library, called from the user's code
        try:
            queue.Queue().get(timeout=3)
        except queue.Empty:
            return name

    with otel_coldstart.phase("download"):
        if sys.argv[1] == "pool":
            with ThreadPoolExecutor(3) as pool:  # two of its threads stay idle or never start
                pool.submit(fetch_shard_from_s3, "model-00001").result()
        else:  # the main thread itself is in the user's code: nothing else to show
            bystander = threading.Thread(target=fetch_shard_from_s3, args=("other",), daemon=True)
            bystander.start()
            time.sleep(3)
    otel_coldstart.ready()
""")


def _stalled(tmp_path, mode: str) -> tuple[str, dict]:
    (tmp_path / "app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    done = subprocess.run([sys.executable, "app.py", mode], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    (trace,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))
    cli = [sys.executable, "-m", "otel_coldstart", "analyze", trace]
    text = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    document = subprocess.run(cli + ["--format", "json"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and document.returncode == 0, text.stderr
    return text.stdout, json.loads(document.stdout)


def test_a_stall_waiting_on_a_pool_shows_the_workers_frames_in_user_code(tmp_path):
    text, document = _stalled(tmp_path, "pool")
    stall_text = text.split("stalled at", 1)[1]
    assert "result (" in stall_text and "concurrent" in stall_text  # the waiting thread: in the pool's result()
    assert "it waited on other threads; in your code then:" in stall_text
    worker_lines = stall_text.split("in your code then:")[1].strip("\n").split("\n\n")[0].splitlines()
    assert worker_lines[0].strip().startswith("thread ThreadPoolExecutor-")
    assert worker_lines[-1].strip().startswith("fetch_shard_from_s3 (") and "app.py:" in worker_lines[-1]
    assert any("queue.py" in line or "threading.py" in line for line in worker_lines[1:-1])  # where it blocked
    assert sum(line.strip().startswith("thread ") for line in worker_lines) == 1  # idle threads left out
    (stall,) = document["startups"][0]["stalls"]
    (worker,) = stall["workers"]
    assert worker["thread"].startswith("thread ThreadPoolExecutor-")
    assert worker["frames"][-1].startswith("fetch_shard_from_s3 (")


def test_a_stall_in_the_threads_own_code_prints_no_workers(tmp_path):
    text, document = _stalled(tmp_path, "own")
    assert "stalled at" in text and "sleep" not in text.split("stalled at")[1].splitlines()[0]
    assert "in your code then" not in text
    (stall,) = document["startups"][0]["stalls"]
    assert stall["workers"] == []
