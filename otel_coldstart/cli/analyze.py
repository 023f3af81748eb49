"""``otel-coldstart analyze FILE``: the start-up breakdown of a trace file."""

from __future__ import annotations

import argparse
import os
import sys

from ..analyze.breakdown import breakdowns
from ..analyze.readers import TraceReadError, read_trace_file
from ..analyze.render import render_text
from .errors import EXIT_INPUT_UNREADABLE, EXIT_NO_STARTUP, EXIT_NOT_A_TRACE, CliError

HELP = "Print the phase breakdown of the start-ups in a trace file."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="trace file (OTLP JSON, as otel-coldstart writes it)")


def run(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.file):
        raise CliError(f"{args.file}: no such file", EXIT_INPUT_UNREADABLE)
    try:
        spans = read_trace_file(args.file)
    except TraceReadError as exc:
        code = EXIT_INPUT_UNREADABLE if str(exc).startswith("cannot read") else EXIT_NOT_A_TRACE
        raise CliError(str(exc), code) from None
    results = breakdowns(spans)
    if not results:
        raise CliError(f"{args.file}: no model.startup span in {len(spans)} spans "
                       "(was the process instrumented with otel-coldstart?)", EXIT_NO_STARTUP)
    for number, result in enumerate(results):
        if number:
            sys.stdout.write("\n")
        render_text(result, sys.stdout)
    return 0
