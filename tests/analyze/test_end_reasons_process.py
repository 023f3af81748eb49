"""Issue 39 items 3 and 14: one end-reason rule for every command, and ``analyze
--require-ready``. Five real start-ups in fresh processes, written by the plugin: one reaches
ready(), one is SIGKILLed in warm-up (as the kubelet or the OOM killer does), one is
SIGTERMed, one crashes on an uncaught exception, one exits before ready(). analyze (text,
markdown, HTML, JSON), whatif, compare and capacity must word each the same way
(analyze/end_reasons.py): on main, whatif said the SIGKILLed one "exited"."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

STARTUP = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
import safetensors.torch
with otel_coldstart.phase("load"):
    for p in sys.argv[2:]:
        safetensors.torch.load_file(p)
mode = sys.argv[1]
if mode == "ready":
    otel_coldstart.ready()
elif mode == "crash":
    raise RuntimeError("the model would not build")
elif mode == "exit":
    sys.exit(0)
else:
    with otel_coldstart.phase("warmup"):
        print("IN_WARMUP", flush=True)
        time.sleep(120)
"""

SIGNALS = {"killed": signal.SIGKILL, "sigterm": signal.SIGTERM}
# end word (coldstart.end_reason) -> the sentence every command must print for it (markdown
# writes "NOT READY" as "not ready" in bold: the same words)
SENTENCES = {
    "killed": re.compile(r"KILLED: no end, last sign of life at \+[\d.]+ (ms|s)"),
    "sigterm": re.compile(r"NOT READY: SIGTERM before ready\(\), during phase 'warmup'", re.I),
    "exception": re.compile(r"NOT READY: uncaught RuntimeError before ready\(\)", re.I),
    "exit": re.compile(r"NOT READY: process exited before ready\(\)", re.I),
}


def _env(directory) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(directory), "OTEL_COLDSTART_SUMMARY": "0",
                "OTEL_COLDSTART_PROGRESS_INTERVAL_S": "0.25", "OTEL_SERVICE_NAME": "ender"})
    return env


@pytest.fixture(scope="module")
def ended(tmp_path_factory, small_checkpoint):
    """{mode: its trace file}, all five in one directory (started together: the machine is shared)."""
    directory = tmp_path_factory.mktemp("ends")
    modes = ("ready", "crash", "exit", "killed", "sigterm")
    processes = {mode: subprocess.Popen([sys.executable, "-c", STARTUP, "wait" if mode in SIGNALS else mode,
                                         *small_checkpoint], env=_env(directory / mode), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for mode in modes}
    try:
        for mode, number in SIGNALS.items():
            process = processes[mode]
            ready, _, _ = select.select([process.stdout], [], [], 180)
            assert ready and process.stdout.readline().strip() == "IN_WARMUP", process.stderr.read()
            time.sleep(1.0)  # a few progress records into warm-up
            process.send_signal(number)
        for process in processes.values():
            process.wait(timeout=180)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
            process.stderr.close()
    assert processes["killed"].returncode == -signal.SIGKILL
    assert processes["crash"].returncode == 1 and processes["exit"].returncode == 0
    files = {}
    everything = directory / "all"
    everything.mkdir()
    for mode in modes:
        (path,) = (directory / mode).glob("startup-*.otlp.jsonl")
        files[mode] = str(path)
        os.link(path, everything / f"{mode}.otlp.jsonl")
    files["all"] = str(everything)
    return files


def _cli(*args) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "otel_coldstart", *args], capture_output=True, text=True,
                            timeout=180)
    assert "Traceback" not in result.stderr, result.stderr
    return result


WORD = {"crash": "exception", "exit": "exit", "killed": "killed", "sigterm": "sigterm"}


def test_every_command_words_each_end_the_same(ended):
    unready = {mode: WORD[mode] for mode in WORD}
    for mode, word in unready.items():
        sentence = SENTENCES[word]
        for fmt in ("text", "markdown", "html"):
            analyzed = _cli("analyze", ended[mode], "--format", fmt)
            assert sentence.search(analyzed.stdout), (mode, fmt, analyzed.stdout[:600])
            assert "exited" not in analyzed.stdout or word == "exit", (mode, fmt)
        document = json.loads(_cli("analyze", ended[mode], "--format", "json").stdout)
        (startup,) = document["startups"]
        assert startup["ready"] is False and startup["end_reason"] == word
        # whatif leaves each out with the same sentence (main: the SIGKILLed one "exited")
        whatif = _cli("whatif", ended["ready"], ended[mode])
        assert whatif.returncode == 0, whatif.stderr
        assert sentence.search(whatif.stdout), (mode, whatif.stdout)
        if word != "exit":
            assert "exited" not in whatif.stdout, (mode, whatif.stdout)
    # compare and capacity count them by the same words
    counts = "1 exception, 1 exit, 1 killed, 1 sigterm"
    compare = _cli("compare", ended["all"], ended["all"])
    assert f"A 4 ({counts})" in compare.stdout and f"B 4 ({counts})" in compare.stdout, compare.stdout
    capacity = _cli("capacity", ended["all"])
    assert f"not ready: 4 ({counts})" in capacity.stdout, capacity.stdout
    whatif = _cli("whatif", ended["all"])
    assert all(SENTENCES[word].search(whatif.stdout) for word in unready.values()), whatif.stdout


def test_require_ready_exits_13_for_any_startup_that_did_not_reach_ready(ended):
    assert _cli("analyze", ended["ready"], "--require-ready").returncode == 0
    for mode in ("crash", "exit", "sigterm", "killed"):
        result = _cli("analyze", ended[mode], "--require-ready")
        assert result.returncode == 13, (mode, result.returncode, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "did not reach ready()" in result.stderr
        assert "trace" in result.stdout  # the report is still written
    result = _cli("analyze", ended["all"], "--require-ready", "--format", "json")
    assert result.returncode == 13 and "4 of 5 start-ups" in result.stderr, result.stderr
    assert len(json.loads(result.stdout)["startups"]) == 5
    # without the flag, as before: killed 11, the others 0
    assert _cli("analyze", ended["sigterm"]).returncode == 0
    assert _cli("analyze", ended["killed"]).returncode == 11
