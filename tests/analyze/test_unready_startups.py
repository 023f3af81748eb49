"""Issue 21.7: compare and capacity count start-ups that did not reach ready() apart (their own
line, by end reason), keep them out of the statistics unless ``--include-unready``; compare's
verdict lines agree with its table, and its columns never run together. Through the CLI, on
trace files as the plugin writes them."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from analyze_records import otlp_attr
from otel_coldstart.cli import main

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
_traces = itertools.count(1)




def _startup(phases: list[tuple[str, float]], end: str = "ready", host_type: str = "g5", tail_ms: float = 10) -> dict:
    """One start-up: its phases back to back on one thread, ``end`` its end reason."""
    trace = f"{next(_traces):032x}"
    spans, cursor = [], T0
    for number, (phase, duration) in enumerate(phases, start=2):
        spans.append({"traceId": trace, "spanId": f"{number:016x}", "parentSpanId": f"{1:016x}",
                      "name": f"coldstart.{phase}", "startTimeUnixNano": str(cursor),
                      "endTimeUnixNano": str(cursor + int(duration * MS)),
                      "attributes": [otlp_attr("coldstart.phase", phase)]})
        cursor += int(duration * MS)
    root_attrs = [otlp_attr("coldstart.ready", end == "ready"), otlp_attr("coldstart.end_reason", end)]
    if end != "ready" and phases:
        root_attrs.append(otlp_attr("coldstart.end.phase", phases[-1][0]))
    spans.insert(0, {"traceId": trace, "spanId": f"{1:016x}", "name": "model.startup", "startTimeUnixNano": str(T0),
                     "endTimeUnixNano": str(cursor + int(tail_ms * MS)), "attributes": root_attrs})
    return {"resourceSpans": [{"resource": {"attributes": [otlp_attr("host.type", host_type)]},
                               "scopeSpans": [{"spans": spans}]}]}


def _write(directory, docs) -> str:
    directory.mkdir()
    for number, doc in enumerate(docs):
        (directory / f"startup-{number:03d}.json").write_text(json.dumps(doc))
    return str(directory)


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _ready(deserialize: float, warmup: float, host_type: str = "g5") -> dict:
    return _startup([("deserialize", deserialize), ("warmup", warmup)], host_type=host_type)


def _killed_in_deserialize(deserialize: float, reason: str = "killed", host_type: str = "g5") -> dict:
    return _startup([("deserialize", deserialize)], end=reason, host_type=host_type)


@pytest.fixture
def rollout(tmp_path):
    """A: 6 ready start-ups. B: the same 6 again, and 4 that died during deserialize (3 killed,
    1 SIGTERMed): phases they never reached must not read as faster."""
    a = [_ready(400 + i, 600 + i) for i in range(6)]
    b = [_ready(401 + i, 601 + i) for i in range(6)]
    b += [_killed_in_deserialize(150 + i) for i in range(3)] + [_killed_in_deserialize(120, "sigterm")]
    return _write(tmp_path / "a", a), _write(tmp_path / "b", b)


def test_compare_counts_unready_startups_apart_and_leaves_them_out(capsys, rollout):
    a, b = rollout
    code, out, _ = _run(capsys, "compare", a, b)
    assert code == 0
    assert "not ready: B 4 (3 killed, 1 sigterm): left out of the statistics (--include-unready counts them)" in out
    assert f"B: {b} (10 start-ups;" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert rows["warmup"].endswith("within noise") and rows["total"].endswith("within noise")
    assert "faster in B" not in out
    document = json.loads(_run(capsys, "compare", a, b, "--format", "json")[1])
    assert document["b"]["not_ready"] == 4 and document["b"]["not_ready_reasons"] == {"killed": 3, "sigterm": 1}
    assert document["counted"] == {"a": 6, "b": 6} and document["faster"] == []


def test_compare_include_unready_counts_them_and_says_so(capsys, rollout):
    a, b = rollout
    code, out, _ = _run(capsys, "compare", a, b, "--include-unready")
    assert code == 0
    assert "not ready: B 4 (3 killed, 1 sigterm): counted in the statistics (--include-unready)" in out
    assert json.loads(_run(capsys, "compare", a, b, "--include-unready", "--format", "json")[1])["counted"] == \
        {"a": 6, "b": 10}


def test_compare_with_no_ready_startup_on_a_side_says_why(capsys, tmp_path):
    a = _write(tmp_path / "a", [_ready(400, 600)])
    b = _write(tmp_path / "b", [_killed_in_deserialize(100), _killed_in_deserialize(90, "exception")])
    code, _, err = _run(capsys, "compare", a, b)
    assert code == 5
    assert err.strip() == (f"otel-coldstart: error: B: {b}: none of its 2 start-up(s) reached ready() (1 exception, "
                           "1 killed); --include-unready compares them as they are")


def test_the_verdict_lines_agree_with_the_table(capsys, tmp_path):
    """B is 1 s slower every time, in a different phase each time: the total is slower, no
    single phase is; the words must say both, not "nothing got slower"."""
    phases = ["download", "build", "deserialize", "cast", "warmup"]
    a = [_startup([(p, 1000 + i) for p in phases]) for i in range(8)]
    b = [_startup([(p, 1000 + i + (1000 if p == phases[i % 5] else 0)) for p in phases]) for i in range(8)]
    code, out, _ = _run(capsys, "compare", _write(tmp_path / "a", a), _write(tmp_path / "b", b))
    assert code == 0
    total = next(line for line in out.splitlines() if line.startswith("  total"))
    assert total.endswith("slower")
    assert "nothing got slower" not in out
    assert "no phase got slower in B beyond noise" in out
    verdict = next(line for line in out.splitlines() if line.startswith("total:"))
    assert verdict.startswith("total: slower in B (+1.00 s")
    assert "no single phase is slower beyond noise" in verdict


def test_compare_columns_never_run_together(capsys, tmp_path):
    a = [_startup([("deserialize", 1), ("warmup", 500)]) for _ in range(6)]
    b = [_startup([("deserialize", 3058.5 + i), ("warmup", 500)]) for i in range(6)]
    code, out, _ = _run(capsys, "compare", _write(tmp_path / "a", a), _write(tmp_path / "b", b))
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("  deserialize"))
    assert re.search(r"\+3\.06 s {2,}\d{4}\.\d\dx {2,}0\.\d{3} {2,}slower$", row), row
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    header = lines[0]
    for line in lines[1:]:  # every row ends its columns where the header does
        assert len(line) <= len(header) + len("within noise") - len("verdict")


def test_capacity_counts_unready_startups_apart_per_group(capsys, tmp_path):
    docs = [_ready(400 + i * 10, 600, "g5") for i in range(6)] + [_ready(800 + i * 10, 600, "p4d") for i in range(3)]
    docs += [_killed_in_deserialize(50, "killed", "g5"), _killed_in_deserialize(60, "sigterm", "g5")]
    docs += [_killed_in_deserialize(70, "killed", "trn1")]  # a group where nothing reached ready()
    directory = _write(tmp_path / "fleet", docs)
    code, out, _ = _run(capsys, "capacity", directory)
    assert code == 0
    blocks = {block.split(":", 1)[0]: block for block in out.split("\n") if block and not block.startswith(" ")}
    assert blocks["all start-ups"].startswith("all start-ups: n=12 start-up(s), 9 ready;")
    assert "    not ready: 3 (2 killed, 1 sigterm): left out of the percentiles (--include-unready counts them)" in out
    assert "host.type=trn1: n=1 start-up(s), 0 ready; no start-up reached ready(): no percentiles" in out
    groups = {g["value"]: g for g in json.loads(_run(capsys, "capacity", directory, "--format", "json")[1])["groups"]}
    assert groups["all"]["counted"] == 9 and groups["all"]["not_ready_reasons"] == {"killed": 2, "sigterm": 1}
    # p50 over the 9 ready start-ups; the killed ones (50-70 ms) would pull it down
    assert groups["all"]["total"]["p50_s"] == pytest.approx(1.05, abs=0.001)
    assert groups["trn1"]["total"] is None and groups["trn1"]["lead_time_s"] is None
    included = {g["value"]: g for g in json.loads(_run(capsys, "capacity", directory, "--format", "json",
                                                       "--include-unready")[1])["groups"]}
    assert included["all"]["counted"] == 12 and included["all"]["total"]["p50_s"] < 1.04
    code, out, _ = _run(capsys, "capacity", directory, "--format", "markdown")
    assert code == 0 and "| all start-ups | 12 | 9 | 3 (2 killed, 1 sigterm) |" in out


def test_capacity_with_no_ready_startup_at_all_says_why(capsys, tmp_path):
    directory = _write(tmp_path / "crashloop", [_killed_in_deserialize(50) for _ in range(3)])
    code, _, err = _run(capsys, "capacity", directory)
    assert code == 5 and "none of the 3 start-up(s) reached ready() (3 killed)" in err
    assert _run(capsys, "capacity", directory, "--include-unready")[0] == 0
