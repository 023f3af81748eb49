"""Issue 39 item 6: user phases named like the plugin's own. ``phase()`` refuses the reserved
names with a ValueError naming them, where the phase is made (instrumented or not); a trace
written before that (a ``phase("unattributed")``, a ``phase("import")`` around a sleep) is
kept apart by the analyzer: one "unattributed" row, the user's phase its own row, and
"next:" never the dominant phase itself. On main: two "unattributed" rows, the 0.5 s user
phase passed over as dominant, the sleep summed with the imports and given import advice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import otel_coldstart
from analyze_records import MS, child, root
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.model import Span
from otel_coldstart.analyze.user_phases import keep_user_phases_apart


@pytest.mark.parametrize("name", semconv.RESERVED_PHASE_NAMES)
def test_phase_refuses_every_reserved_name_naming_them(name):
    with pytest.raises(ValueError) as raised:
        otel_coldstart.phase(name)
    message = str(raised.value)
    assert f"{name!r} is reserved" in message
    assert all(reserved in message for reserved in ("import", "unattributed", "deserialize", "cast", "compile"))
    with pytest.raises(ValueError):
        otel_coldstart.phase(f"  {name} ")  # the name as used: stripped


def test_download_warmup_and_other_names_stay_yours(traced):
    for name in ("download", "warmup", "build_model", "Import", "import_libraries", "unattributed_work"):
        with otel_coldstart.phase(name):
            pass
    assert {s.attributes.get("coldstart.phase") for s in traced.spans()} >= {"download", "warmup", "build_model"}
    with pytest.raises(ValueError, match="reserved"):  # as a decorator: refused where it is written
        @otel_coldstart.phase("cast")
        def convert():  # pragma: no cover - never defined
            pass


def _user(parent: Span, phase: str, start_ms: float, end_ms: float) -> Span:
    """What phase() writes: coldstart.<name>, the phase, the thread's id and name."""
    return child(parent, semconv.phase_span_name(phase), phase, start_ms, end_ms,
                 **{semconv.THREAD_NAME: "MainThread"})


def test_only_spans_exactly_as_phase_writes_them_are_renamed():
    r = root(3000)
    ours = [
        child(r, "coldstart.import", "import", 0, 400, **{semconv.THREAD_NAME: "MainThread"}),  # process start
        child(r, "coldstart.import", "import", 900, 950, **{semconv.THREAD_NAME: "MainThread",
                                                             semconv.IMPORT_MODULE: "numpy"}),
        child(r, "coldstart.deserialize", "deserialize", 1000, 1100,
              **{semconv.THREAD_NAME: "MainThread", semconv.FILE_PATH: "/m.safetensors"}),
        child(r, "coldstart.cast", "cast", 1100, 1200),  # no thread name: not what phase() writes
        child(r, "coldstart.transformers.tie_weights", "transformers.tie_weights", 1200, 1250,
              **{semconv.THREAD_NAME: "MainThread"}),  # one of ours that may carry nothing else
    ]
    users = [_user(r, "unattributed", 400, 900), _user(r, "import", 1300, 1800), _user(r, "cast", 1800, 1900)]
    spans = keep_user_phases_apart([r, *ours, *users])
    assert spans[1:1 + len(ours)] == ours
    assert [s.phase for s in spans[1 + len(ours):]] == ["unattributed (user phase)", "import (user phase)",
                                                       "cast (user phase)"]
    (b,) = breakdowns(spans)
    names = [p.phase for p in b.phases]
    assert len(names) == len(set(names)) and "unattributed" not in names
    assert b.phase("import").busy_ns == 450 * MS and b.phase("import (user phase)").busy_ns == 500 * MS
    assert keep_user_phases_apart([r, *ours]) == [r, *ours]  # nothing of a user's: the same list back


OLD_VERSION = r"""
import time
import otel_coldstart
from otel_coldstart import semconv
semconv.RESERVED_PHASE_NAMES = ()  # as otel-coldstart before issue 39 allowed: the trace an older version wrote
otel_coldstart.instrument()
with otel_coldstart.phase("unattributed"):
    time.sleep(1.5)
with otel_coldstart.phase("import"):
    time.sleep(0.3)
with otel_coldstart.phase("build"):
    time.sleep(0.1)
otel_coldstart.ready()
"""

HOST = r"""
import otel_coldstart
otel_coldstart.instrument()
try:
    with otel_coldstart.phase("unattributed"):
        print("ran inside", flush=True)
except ValueError as exc:
    print("REFUSED", exc.__traceback__.tb_lineno, flush=True)
with otel_coldstart.phase("build"):
    pass
otel_coldstart.ready()
print("READY", flush=True)
"""


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path / "traces"), "OTEL_COLDSTART_SUMMARY": "0"})
    return env


@pytest.mark.process
def test_the_host_gets_the_valueerror_at_its_own_line_and_carries_on(tmp_path):
    result = subprocess.run([sys.executable, "-c", HOST], env=_env(tmp_path), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.split() == ["REFUSED", "5", "READY"]  # line 5: the with statement, nothing ran inside


@pytest.mark.process
def test_an_older_trace_with_user_phases_named_like_ours_reads_apart(tmp_path):
    result = subprocess.run([sys.executable, "-c", OLD_VERSION], env=_env(tmp_path), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    analyzed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", str(path)], capture_output=True,
                              text=True, timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr
    out = analyzed.stdout
    rows = re.findall(r"^  (\S.*?)\s{2,}[\d.]+ (?:ms|s)\s+[\d.]+%", out, re.M)
    assert rows.count("unattributed") == 1, out  # main: two "unattributed" rows
    assert "unattributed (user phase)" in rows and "import (user phase)" in rows and "import" in rows
    dominant = re.search(r"dominant phase: (.+?) \([\d.]+ (?:ms|s)", out).group(1)
    assert dominant == "unattributed (user phase)", out  # the 1.5 s sleep; main passed it over
    for line in re.findall(r"next: (.+?) [\d.]+ (?:ms|s)", out):
        assert line != dominant, out
    document = json.loads(subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", str(path), "--format",
                                          "json"], capture_output=True, text=True, timeout=120).stdout)
    phases = [p["phase"] for p in document["startups"][0]["phases"]]
    assert len(phases) == len(set(phases)) and "unattributed" not in phases
