"""The JSON-typed attribute variant of the Collector ClickHouse exporter's table (its ``json``
option: ``ResourceAttributes``/``SpanAttributes`` as ClickHouse's JSON type; DDL copied in
sources/clickhouse_ddl.TRACES_JSON_TABLE with its commit), run by chDB and loaded by
``export --clickhouse --json-attributes``: the reader tells it from the Map table by the
columns' types, and every start-up and report equals the file path's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("chdb")

from otel_coldstart.cli import main  # noqa: E402
from otel_coldstart.cli._clickhouse import load_clickhouse  # noqa: E402
from otel_coldstart.cli._inputs import load_files  # noqa: E402
from startups_otlp import T0, write  # noqa: E402
from test_clickhouse import _args, _record  # noqa: E402

RANGE = ["--from", str(T0 // 10**9 - 60), "--to", str(T0 // 10**9 + 86400)]


@pytest.fixture(scope="module")
def json_fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("json-fleet")
    a, b = str(root / "v1.jsonl"), str(root / "v2.jsonl")
    write(a, 40, seed=3, version="1.0")
    write(b, 40, seed=4, version="2.0", first=40)
    db = str(root / "chdb")
    assert main(["export", "--clickhouse", f"chdb:{db}", "--json-attributes", a, b]) == 0
    return {"a": a, "b": b, "db": db}


def _query(db: str, sql: str) -> list:
    from chdb import session

    s = session.Session(db)
    try:
        return [json.loads(line) for line in s.query(sql, "JSONCompactEachRow").bytes().splitlines()]
    finally:
        s.close()


def test_the_table_is_the_exporters_json_variant_with_typed_values(json_fleet):
    types = dict(_query(json_fleet["db"], "SELECT name, type FROM system.columns WHERE table = 'otel_traces' "
                                          "AND name LIKE '%Attributes'"))
    assert types["SpanAttributes"] == types["ResourceAttributes"] == "JSON"
    # a dotted key is a path, and the values kept their types (not text, as in a Map)
    (kinds,), = _query(json_fleet["db"], "SELECT groupUniqArray(dynamicType(SpanAttributes.`thread.id`)) "
                                         "FROM otel_traces WHERE SpanName = 'model.startup'")
    assert kinds == ["Int64"]


def test_every_startup_equals_the_file_paths_record(json_fleet):
    files = load_files([json_fleet["a"], json_fleet["b"]], _args(), slim=True).startups
    inputs = load_clickhouse(_args(clickhouse=f"chdb:{json_fleet['db']}"))
    assert sorted(map(_record, inputs.startups)) == sorted(map(_record, files))
    assert inputs.sources[0]["reduced_in_sql"] >= 0.85 * 80 and inputs.sources[0]["analysed_from_spans"] >= 4
    by_root = {(b.trace_id, b.root.span_id): b for b in files}
    for b in inputs.startups:  # the roots' attributes with their types, as in the files
        assert b.root.attributes == by_root[b.trace_id, b.root.span_id].root.attributes
        assert b.root.resource == by_root[b.trace_id, b.root.span_id].root.resource


@pytest.mark.parametrize("command, extra", [
    ("capacity", ["--by", "k8s.cluster.name", "--where", "resource.k8s.cluster.name=prod"]),
    ("whatif", []),
])
def test_reports_are_the_same(json_fleet, capsys, command, extra):
    files = [json_fleet["a"], json_fleet["b"]]
    if "--where" in extra:  # the files' side of the condition: the same start-ups, by hand
        files = []
    if files:
        assert main([command, *files, "--format", "json"]) == 0
        by_files = json.loads(capsys.readouterr().out)
    assert main([command, "--clickhouse", f"chdb:{json_fleet['db']}", *RANGE, "--format", "json", *extra]) == 0
    by_sql = json.loads(capsys.readouterr().out)
    if files:
        by_files.pop("skipped", None), by_sql.pop("skipped", None)
        assert by_sql == by_files
    else:
        everyone = load_files([json_fleet["a"], json_fleet["b"]], _args(), slim=True).startups
        prod = [b for b in everyone if b.root.resource.get("k8s.cluster.name") == "prod"]
        assert by_sql["groups"][0]["startups"] == len(prod) < len(everyone)
