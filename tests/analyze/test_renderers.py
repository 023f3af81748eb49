"""Issue 22.6: one renderer signature for every format, as pyinstrument's renderers take a
session: ``render(report, out)``, each report plain data. Issue 41.3: one table of them for
every command (the CLI's ``--format`` choices), and the table is the CLI's only way out."""

from __future__ import annotations

import argparse
import inspect
import io
import json

import pytest

from analyze_records import data_file
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.capacity import capacity_summary
from otel_coldstart.analyze.compare import compare
from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.analyze.renderers import FORMATS, RENDERERS
from otel_coldstart.analyze.report import CapacityReport, CompareReport, Report, Side, WhatIfReport
from otel_coldstart.analyze.whatif import project
from otel_coldstart.cli import build_parser, main

COLD, WARM = data_file("demo-cold-first-shard.otlp.jsonl"), data_file("demo-warm.otlp.jsonl")


def render_to_string(renderer, report) -> str:
    out = io.StringIO()
    renderer(report, out)
    return out.getvalue()


def _startups():
    return breakdowns(read_trace(COLD).spans) + breakdowns(read_trace(WARM).spans)


def test_every_format_of_every_command_renders_a_report_with_one_signature():
    startups = _startups()
    reports = {
        "analyze": Report.of(startups),
        "compare": CompareReport(compare(startups[:1], startups[1:]), Side("A", 1), Side("B", 1)),
        "capacity": CapacityReport(capacity_summary(startups)),
        "whatif": WhatIfReport(project(startups)),
    }
    assert set(RENDERERS) == set(reports)
    for command, report in reports.items():
        formats = RENDERERS[command]
        assert tuple(formats) == FORMATS == ("text", "markdown", "json", "html"), command
        for name, renderer in formats.items():
            assert list(inspect.signature(renderer).parameters) == ["report", "out"], (command, name)
            text = render_to_string(renderer, report)
            assert text.strip(), (command, name)
            if name == "json":
                json.loads(text)
            if name == "html":
                assert text.startswith("<!DOCTYPE html>") and "default-src 'none'" in text


@pytest.mark.parametrize("command", sorted(RENDERERS))
@pytest.mark.parametrize("form", FORMATS)
def test_every_command_writes_every_format_through_the_registry(command, form, monkeypatch, capsys):
    """What the command prints is, byte for byte, its registered renderer's output of the
    report it made: nothing else writes a report."""
    rendered = []

    def recording(report, out):
        rendered.append(report)
        real(report, out)

    real = RENDERERS[command][form]
    monkeypatch.setitem(RENDERERS[command], form, recording)
    assert main([command, COLD, WARM, "--format", form]) == 0
    [report] = rendered
    assert capsys.readouterr().out == render_to_string(real, report)
    assert report.__class__.__name__ == {"analyze": "Report", "compare": "CompareReport",
                                         "capacity": "CapacityReport", "whatif": "WhatIfReport"}[command]


def test_the_format_choices_of_every_command_are_the_registry_s():
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for command in RENDERERS:
        [option] = [a for a in commands.choices[command]._actions if "--format" in a.option_strings]
        assert tuple(option.choices) == FORMATS and option.default == "text", command
