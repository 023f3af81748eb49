"""capacity --ramp: the warm pool that covers a scale-out's lead time, with its arithmetic,
overall and per group, in every format."""

from __future__ import annotations

import json

import pytest

from analyze_records import root, write_otlp
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.capacity import WarmPool, capacity_summary
from otel_coldstart.cli import main

S = 1_000_000_000


def test_warm_pool_is_the_ramp_over_the_lead_time_rounded_up():
    pool = WarmPool(ramp_per_min=12, lead_time_ns=95 * S, provisioning_ns=90 * S, p95_ns=5 * S)
    assert pool.exact == pytest.approx(19.0) and pool.replicas == 19
    assert WarmPool(12, 96 * S, 90 * S, 6 * S).replicas == 20  # 19.2: one more replica, never a fraction
    assert WarmPool(0.5, 30 * S, 0, 30 * S).replicas == 1
    assert "12 replicas/min x (1.50 min" not in pool.arithmetic()
    assert pool.arithmetic() == ("12 replicas/min x (90.00 s provisioning + 5.00 s p95 start-up) / 60 s = 19.00 "
                                 "-> 19 warm replica(s)")


def _fleet():
    spans = []
    for number, (host, seconds) in enumerate([("g5.xlarge", 30), ("g5.xlarge", 40), ("p4d", 100), ("p4d", 120)]):
        spans.append(root(seconds * 1000, trace=f"{number + 1:032x}", resource={"host.type": host}))
    return spans


def test_each_group_gets_its_own_pool_from_its_own_p95():
    groups = capacity_summary(breakdowns(_fleet()), ["host.type"])
    pools = {g.value: g.warm_pool(6, 60 * S) for g in groups}
    # p95 of (100, 120) s is 119 s: 6/min x (60 + 119) s / 60 s = 17.9 -> 18
    assert pools["p4d"].replicas == 18 and pools["g5.xlarge"].replicas == 10  # 6 x (60 + 39.5) / 60 = 9.95
    assert pools["all"].replicas == 18


def test_cli_ramp_in_every_format(tmp_path, capsys):
    path = write_otlp(tmp_path / "fleet.jsonl", _fleet())
    args = ["capacity", path, "--by", "host.type", "--provisioning", "60s", "--ramp", "6"]
    assert main(args + ["--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ramp_replicas_per_min"] == 6
    pools = {g["value"]: g["warm_pool"] for g in doc["groups"]}
    assert pools["p4d"]["replicas"] == 18 and pools["p4d"]["lead_time_s"] == pytest.approx(179.0)
    assert "= 17.90 -> 18 warm replica(s)" in pools["p4d"]["arithmetic"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.count("warm pool: 6 replicas/min x (60.00 s provisioning + ") == 3  # all, and each host type
    assert main(args + ["--format", "markdown"]) == 0
    assert "- host.type=p4d: 6 replicas/min" in capsys.readouterr().out
    assert main(["capacity", path, "--format", "json"]) == 0  # without --ramp: no pool, null
    assert all(g["warm_pool"] is None for g in json.loads(capsys.readouterr().out)["groups"])


@pytest.mark.parametrize("ramp", ["0", "-3", "nan", "inf", "1e9"])
def test_cli_bad_ramp_is_a_usage_error(tmp_path, capsys, ramp):
    path = write_otlp(tmp_path / "fleet.jsonl", _fleet())
    assert main(["capacity", path, "--ramp", ramp]) == 2
    err = capsys.readouterr().err
    assert "--ramp must be a positive number" in err and err.count("\n") == 1
