"""capacity / compare / whatif --clickhouse against the file path, on the Collector ClickHouse
exporter's own table (its DDL, run by chDB), loaded by ``export --clickhouse``; and the same
over ClickHouse's HTTP interface (a local server running each query on chDB). The central
check: every start-up the SQL reduces equals the file path's record of it (phases, unattributed,
cache verdict, end), so every report made of them is the same."""

from __future__ import annotations

import argparse
import json
import os

import pytest

pytest.importorskip("chdb")

from clickhouse_http import ClickHouseOverChdb  # noqa: E402
from otel_coldstart.cli import main  # noqa: E402
from otel_coldstart.cli._clickhouse import add_clickhouse_arguments, load_clickhouse  # noqa: E402
from otel_coldstart.cli._inputs import add_file_arguments, load_files  # noqa: E402
from startups_otlp import T0, write  # noqa: E402

RANGE = ["--from", str(T0 // 10**9 - 60), "--to", str(T0 // 10**9 + 86400)]
COUNT = 120


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """120 start-ups in two files (releases 1.0 and 2.0), exported to a chDB directory."""
    root = tmp_path_factory.mktemp("fleet")
    a, b = str(root / "v1.jsonl"), str(root / "v2.jsonl")
    write(a, COUNT // 2, seed=1, version="1.0")
    write(b, COUNT // 2, seed=2, version="2.0", first=COUNT // 2)
    db = str(root / "chdb")
    assert main(["export", "--clickhouse", f"chdb:{db}", a, b]) == 0
    return {"a": a, "b": b, "db": db, "root": root}


def _args(**values) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_file_arguments(parser)
    add_clickhouse_arguments(parser)
    args = parser.parse_args([])
    for key, value in values.items():
        setattr(args, key, value)
    args.time_from, args.time_to = RANGE[1], RANGE[3]
    return args


def _record(b) -> tuple:
    return (b.trace_id, b.root.span_id, b.duration_ns, b.ready, b.end_reason, b.unattributed_ns,
            b.total_busy_ns, tuple(sorted((p.phase, p.busy_ns, p.spans) for p in b.phases)), b.cache,
            b.root.resource.get("host.type"))


def test_every_startup_reduced_in_sql_equals_the_file_paths_record(fleet, capsys):
    files = load_files([fleet["a"], fleet["b"]], _args(), slim=True).startups
    inputs = load_clickhouse(_args(clickhouse=f"chdb:{fleet['db']}"))
    source = inputs.sources[0]
    assert len(files) >= COUNT - 2  # the killed ones are rebuilt, the two-rank traces count twice
    assert sorted(map(_record, inputs.startups)) == sorted(map(_record, files))
    # Most in SQL; the shapes it leaves (one start-up in 10) from their spans.
    assert source["reduced_in_sql"] >= 0.85 * COUNT
    assert 8 <= source["analysed_from_spans"] <= 20
    varied = {p.phase for b in files for p in b.phases}
    assert {"deserialize", "cast", "h2d", "compile", "graph_capture"} <= varied
    assert {b.cache for b in files} == {"cold", "warm", None} or {b.cache for b in files} >= {"cold", "warm"}
    assert {b.end_reason for b in files} >= {"ready", "sigterm", "exception"}


def _json_report(argv, capsys) -> tuple[int, dict | str]:
    code = main(argv)
    out = capsys.readouterr().out
    try:
        return code, json.loads(out)
    except ValueError:
        return code, out


@pytest.mark.parametrize("extra", [[], ["--by", "k8s.cluster.name", "--ramp", "3", "--provisioning", "90s"],
                                   ["--include-unready"]])
def test_capacity_report_is_the_same(fleet, capsys, extra):
    code_f, by_files = _json_report(["capacity", fleet["a"], fleet["b"], "--format", "json", *extra], capsys)
    code_c, by_sql = _json_report(["capacity", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "--format", "json",
                                   *extra], capsys)
    assert code_c == code_f == 0
    assert by_sql == by_files


def test_where_and_service_select_like_the_files_split(fleet, tmp_path, capsys):
    code, prod = _json_report(["capacity", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "--format", "json",
                               "--where", "resource.k8s.cluster.name=prod", "--service", "llm-server"], capsys)
    assert code == 0
    everyone = load_files([fleet["a"], fleet["b"]], _args(), slim=True).startups
    expected = [b for b in everyone if b.root.resource.get("k8s.cluster.name") == "prod"]
    assert prod["groups"][0]["startups"] == len(expected) < len(everyone)


def test_compare_sides_by_condition_equal_compare_of_the_files(fleet, capsys):
    code_f, by_files = _json_report(["compare", fleet["a"], fleet["b"], "--format", "json"], capsys)
    code_c, by_sql = _json_report(["compare", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "--format", "json",
                                   "resource.service.version=1.0", "resource.service.version=2.0"], capsys)
    assert code_c == code_f == 0
    assert by_sql["rows"] == by_files["rows"] and by_sql["counted"] == by_files["counted"]
    assert by_sql["warnings"] == by_files["warnings"]
    assert any(row["verdict"] == "slower" for row in by_sql["rows"])  # release 2.0's import is 1.5x


def test_whatif_is_the_same(fleet, capsys):
    code_f, by_files = _json_report(["whatif", fleet["a"], fleet["b"], "--format", "json"], capsys)
    code_c, by_sql = _json_report(["whatif", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "--format", "json"],
                                  capsys)
    assert code_c == code_f
    by_files.pop("skipped", None), by_sql.pop("skipped", None)
    assert by_sql == by_files


@pytest.mark.parametrize("argv, code, says", [
    (["--service", "llm-server' OR 1=1 --"], 5, "no model.startup"),
    (["--where", "resource.k8s.cluster.name=prod' OR '1'='1"], 5, "no model.startup"),
    (["--where", "resource.k8s.cluster.name']=1 OR 1=1 --=x"], 2, "--where"),
    (["--where", "1=1"], 2, "--where"),
    (["--table", "otel_traces; DROP TABLE otel_traces"], 2, "--table"),
    (["--table", "otel_traces`"], 2, "--table"),
    (["--max-rows", "100"], 7, "spans of"),
    (["--since", "30x"], 2, "--since"),
    (["--table", "not_there"], 9, "no such table or database not_there"),
])
def test_hostile_or_bad_values_are_refused_or_match_nothing(fleet, capsys, argv, code, says):
    assert main(["capacity", "--clickhouse", f"chdb:{fleet['db']}", *RANGE[:0], *argv]
                + ([] if "--since" in argv else RANGE)) == code
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if code != 2:  # a query ran (a usage error is refused before any): the table is still there, whole
        assert main(["capacity", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "-o", os.devnull]) == 0
        capsys.readouterr()


def test_max_rows_refusal_says_the_figure(fleet, capsys):
    assert main(["capacity", "--clickhouse", f"chdb:{fleet['db']}", *RANGE, "--max-rows", "1000"]) == 7
    err = capsys.readouterr().err
    spans = sum(1 for path in (fleet["a"], fleet["b"]) for line in open(path) for _ in json.loads(line)
                ["resourceSpans"][0]["scopeSpans"][0]["spans"])
    assert f"would read {spans:,} spans" in err and "--max-rows 1,000" in err


def test_files_and_clickhouse_together_or_neither_are_usage_errors(fleet, capsys):
    assert main(["capacity", fleet["a"], "--clickhouse", f"chdb:{fleet['db']}"]) == 2
    assert main(["capacity"]) == 2
    assert main(["capacity", fleet["a"], "--where", "service=x"]) == 2
    assert main(["capacity", "--clickhouse", "ftp://host/db"]) == 2
    assert main(["capacity", "--clickhouse", "http://u:pw@127.0.0.1:1/db"]) == 2
    err = capsys.readouterr().err
    assert "pw" not in err.replace("password", "") and "Traceback" not in err


def test_the_http_interface_gives_the_same_and_keeps_the_password_out(fleet, tmp_path, capsys, monkeypatch):
    code_f, by_files = _json_report(["capacity", fleet["a"], fleet["b"], "--format", "json", "--by",
                                     "k8s.cluster.name"], capsys)
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", "s3cret-pw")
    with ClickHouseOverChdb(str(tmp_path / "server")) as server:
        assert main(["export", "--clickhouse", server.url, fleet["a"], fleet["b"]]) == 0
        code, by_http = _json_report(["capacity", "--clickhouse", server.url, *RANGE, "--format", "json", "--by",
                                      "k8s.cluster.name"], capsys)
        assert code == 0 and by_http == by_files
        # Reads went as GET with bound parameters: no value typed by a user in the SQL text
        assert main(["capacity", "--clickhouse", server.url, *RANGE, "--service", "llm-server' OR 1=1 --"]) == 5
        assert not any("OR 1=1" in sql for sql in server.queries)
        monkeypatch.setenv("CLICKHOUSE_PASSWORD", "wrong")
        assert main(["capacity", "--clickhouse", server.url, *RANGE]) == 9
        monkeypatch.setenv("CLICKHOUSE_PASSWORD", "s3cret-pw")
        server.delay_s = 3
        assert main(["capacity", "--clickhouse", server.url, *RANGE, "--timeout", "1"]) == 9
        server.delay_s = 0
    captured = capsys.readouterr()
    assert "authentication failed for user 'analyst'" in captured.err and "no answer within 1 s" in captured.err
    assert "s3cret-pw" not in captured.out + captured.err and "wrong" not in captured.err
    assert "Traceback" not in captured.err


def test_export_refuses_what_is_not_a_trace(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["export", "--clickhouse", f"chdb:{tmp_path / 'db'}", str(bad)]) == 4
    assert "Traceback" not in capsys.readouterr().err
