"""Issue 22.6: one renderer signature for every format, as pyinstrument's renderers take a
session: ``render(report, out)``, each command's formats a table of them (the CLI's
``--format`` choices), each report plain data."""

from __future__ import annotations

import inspect
import json

from analyze_records import data_file
from otel_coldstart.analyze.capacity import capacity_summary
from otel_coldstart.analyze.compare import compare
from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.renderers import ANALYZE, COMPARE
from otel_coldstart.analyze.report import CapacityReport, CompareReport, Report, Side, render_to_string
from otel_coldstart.cli.capacity import RENDERERS as CAPACITY


def _startups():
    return breakdowns(read_trace(data_file("demo-cold-first-shard.otlp.jsonl")).spans) + \
        breakdowns(read_trace(data_file("demo-warm.otlp.jsonl")).spans)


def test_every_format_of_every_command_renders_a_report_with_one_signature():
    startups = _startups()
    reports = {
        "analyze": (ANALYZE, Report.of(startups)),
        "compare": (COMPARE, CompareReport(compare(startups[:1], startups[1:]), Side("A", 1), Side("B", 1))),
        "capacity": (CAPACITY, CapacityReport(capacity_summary(startups))),
    }
    for command, (formats, report) in reports.items():
        assert set(formats) == {"text", "markdown", "json", "html"}, command
        for name, renderer in formats.items():
            assert list(inspect.signature(renderer).parameters) == ["report", "out"], (command, name)
            text = render_to_string(renderer, report)
            assert text.strip(), (command, name)
            if name == "json":
                json.loads(text)
            if name == "html":
                assert text.startswith("<!DOCTYPE html>") and "default-src 'none'" in text
