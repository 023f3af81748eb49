"""The command's habits, as a user meets them in a fresh process: usage errors exit 2
(argparse's usage block and one error line; our own usage errors one line), `--version`,
help text for every option of every sub-command, directories and their suffixes, waterfalls
next to an existing directory, and tables that stay aligned with long names."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import subprocess
import sys

import pytest

import otel_coldstart
from analyze_records import child, only, root, shard
from otel_coldstart.analyze.render import render_startup_text
from otel_coldstart.cli import _inputs, build_parser

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "traces")
TRACE = os.path.join(DATA, "demo-cold-first-shard.otlp.jsonl")


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("otel-coldstart",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, path + (name,))
        else:
            yield path, action


def test_every_option_of_every_sub_command_has_help():
    seen = list(_options(build_parser()))
    missing = [(" ".join(path), action.option_strings or action.dest) for path, action in seen
               if not action.help or action.help == argparse.SUPPRESS]
    assert not missing, missing
    commands = {path[1] for path, _ in seen if len(path) > 1}
    assert commands == {"demo", "analyze", "floor", "compare", "capacity", "run", "whatif", "export"}
    assert len(seen) > 40  # the walk found the sub-commands' options, not only the top level


@pytest.mark.process
def test_version():
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"otel-coldstart {otel_coldstart.__version__}"


@pytest.mark.process
@pytest.mark.parametrize("args", [
    ("analyze", "--no-such-option", TRACE),
    ("analyze", "--format", "yaml", TRACE),
    ("compare", TRACE),
    ("floor",),
    ("no-such-command",),
])
def test_argparse_usage_errors_are_a_usage_block_and_one_error_line(args):
    result = cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("usage: otel-coldstart")
    errors = [line for line in lines if ": error: " in line]
    assert errors == [lines[-1]] and lines[-1].startswith("otel-coldstart")
    assert "Traceback" not in result.stderr


@pytest.mark.process
def test_jaeger_without_service_is_a_usage_error_before_any_request():
    with socket.socket() as listener:  # a server that would see any connection attempt
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        result = cli("analyze", "--jaeger", f"http://127.0.0.1:{listener.getsockname()[1]}")
        with pytest.raises(socket.timeout):
            listener.accept()
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "otel-coldstart: error: --jaeger needs --service NAME or --trace-id ID"]


@pytest.mark.process
@pytest.mark.parametrize("args, code", [
    (("analyze", "/no/such/file.json"), 3),
    (("analyze", TRACE, "--budget", "total"), 2),
    (("analyze", "--jaeger", "http://127.0.0.1:9", "--tempo", "http://127.0.0.1:9"), 2),
    (("analyze", TRACE, "--max-input-mb", "0"), 2),
    (("run",), 2),
])
def test_every_other_error_is_one_line(args, code):
    result = cli(*args)
    assert result.returncode == code, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("otel-coldstart: error: ")


@pytest.mark.process
def test_the_empty_directory_error_lists_every_suffix_that_is_read(tmp_path):
    (tmp_path / "notes.md").write_text("not a trace")
    result = cli("analyze", str(tmp_path))
    assert result.returncode == 3
    for suffix in _inputs.TRACE_SUFFIXES:
        assert f"*{suffix}" in result.stderr
    # ... and each of them is really read.
    for suffix in _inputs.TRACE_SUFFIXES:
        directory = tmp_path / suffix.strip(".")
        directory.mkdir()
        shutil.copy(TRACE, directory / f"startup{suffix}")
        read = cli("analyze", str(directory))
        assert read.returncode == 0, (suffix, read.stderr)
        assert "model.startup" in read.stdout


@pytest.mark.process
def test_an_existing_waterfall_directory_still_gets_the_report(tmp_path):
    out = tmp_path / "waterfalls"
    out.mkdir()
    (out / "unrelated.txt").write_text("keep me")
    first = cli("analyze", TRACE, "--waterfall", str(out))
    assert first.returncode == 0, first.stderr
    assert "dominant phase" in first.stdout
    (svg,) = [p for p in out.iterdir() if p.suffix == ".svg"]
    svg.write_text("<svg>edited by hand</svg>")

    again = cli("analyze", TRACE, "--waterfall", str(out))
    assert "dominant phase" in again.stdout  # the report is never lost to an SVG that exists
    assert again.returncode == 6
    assert f"{svg} exists; not overwriting it" in again.stderr
    assert svg.read_text() == "<svg>edited by hand</svg>" and (out / "unrelated.txt").read_text() == "keep me"

    forced = cli("analyze", TRACE, "--waterfall", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert svg.read_text().startswith("<svg") and "edited by hand" not in svg.read_text()


def test_long_phase_names_keep_the_table_aligned():
    r = root(1000)
    spans = [r, child(r, "coldstart.init_process_group", "init_process_group", 0, 300),
             child(r, "coldstart.import_libraries", "import_libraries", 300, 500),
             child(r, "coldstart.cast", "cast", 500, 600),
             shard(r, 0, 600, 700, 1 << 20, "warm", 0)]
    b = only(spans)
    out = io.StringIO()
    render_startup_text(b, out)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.lstrip().startswith("phase"))
    rows = [line for line in lines if line.lstrip().split(" ")[0] in
            ("init_process_group", "import_libraries", "cast", "unattributed")]
    assert len(rows) == 4
    time_end = header.index("time") + len("time")
    for row in rows:  # every time value ends where the header's "time" ends
        assert row[:time_end].endswith(" ms") or row[:time_end].endswith(" s"), (header, row)
        assert row[time_end - 1] != " " and row[time_end] == " ", (header, row)


def test_long_shard_names_keep_the_shard_table_aligned():
    from dataclasses import replace

    r = root(1000)
    b = only([r, shard(r, 0, 0, 100, 1 << 20, "warm", 0), shard(r, 1, 100, 200, 1 << 20, "cold", 1 << 20)])
    long_path = "/ckpt/" + "very-long-shard-name-" * 3 + "00002.safetensors"
    b = replace(b, shards=(b.shards[0], replace(b.shards[1], path=long_path)))
    out = io.StringIO()
    render_startup_text(b, out)
    rows = [line for line in out.getvalue().splitlines() if line.startswith("    #")]
    assert len(rows) == 2
    size_ends = {row.index("MiB") for row in rows}
    assert len(size_ends) == 1, rows


def _doc(name: str) -> str:
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", name), encoding="utf-8") as handle:
        return handle.read()


def test_cli_doc_lists_exactly_the_exit_codes_the_code_uses():
    import re

    from otel_coldstart.cli import errors, run

    used = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    used |= {run.EXIT_COMMAND_NOT_FOUND, run.EXIT_COMMAND_NOT_EXECUTABLE, 130}
    documented = {int(m) for m in re.findall(r"^\|\s*(\d+)\s*\|", _doc("cli.md"), flags=re.M)}
    assert documented == used


def test_cli_doc_names_every_suffix_a_directory_stands_for():
    doc = _doc("cli.md")
    line = next(ln for ln in doc.splitlines() if "A directory stands for" in ln or "a directory stands for" in ln
                or "stands for the" in ln)
    context = doc[doc.index(line):doc.index(line) + 300]
    for suffix in _inputs.TRACE_SUFFIXES:
        assert f"*{suffix}" in context, suffix
