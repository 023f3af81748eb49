"""``otel-coldstart run``: did the command's Python processes start the plugin?

Each Python process the command starts runs our ``sitecustomize`` (``otel_coldstart/_bootstrap``),
which leaves a note in a directory named by ``OTEL_COLDSTART_RUN_REPORT_DIR``: ``started``,
``skipped`` (a launcher such as torchrun, or disabled by
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``), ``cannot_import`` (that interpreter cannot import
otel_coldstart: a system or pyenv Python, a pipx install of the tool) or ``failed``. When
the command ends, the notes say whether anything was traced: if nothing was, that is said
on stderr and recorded on the launch span (``coldstart.launch.processes_started`` 0 and
``coldstart.launch.processes_not_started``), which ``analyze`` explains.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

from .. import semconv

REPORT_DIR_VARIABLE = "OTEL_COLDSTART_RUN_REPORT_DIR"  # the same name as in _bootstrap/sitecustomize.py


@dataclass(frozen=True)
class RunNotes:
    started: int  # processes that started the plugin
    skipped: int  # launchers and deliberately disabled processes
    not_started: tuple[str, ...]  # why each of the others did not: "<interpreter> cannot import ..."

    def span_attributes(self) -> dict:
        attrs: dict = {semconv.LAUNCH_PROCESSES_STARTED: self.started}
        if self.not_started:
            attrs[semconv.LAUNCH_PROCESSES_NOT_STARTED] = self.not_started
        return attrs

    def problem(self, command: list[str]) -> str | None:
        """One line for stderr when no process of the command started the plugin, else None."""
        if self.started:
            if self.not_started:
                return (f"{len(self.not_started)} Python process(es) of the command were not traced: "
                        f"{self.not_started[0]}")
            return None
        if self.not_started:
            return (f"nothing was traced: {self.not_started[0]}; run it with {sys.executable} (where "
                    "otel-coldstart is installed) or install otel-coldstart into that interpreter")
        if self.skipped:
            return None  # disabled on purpose, or a launcher whose children never ran Python
        program = os.path.basename(command[0]) if command else "the command"
        return (f"nothing was traced: no Python process of {program} ran the plugin's bootstrap (not a Python "
                "program, or started with python -I/-E/-S, which ignore PYTHONPATH)")


def make_report_dir() -> str:
    return tempfile.mkdtemp(prefix="otel-coldstart-run-")


def read_notes(directory: str) -> RunNotes:
    started = skipped = 0
    not_started: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                note = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(note, dict):
            continue
        state = note.get("state")
        if state == "started":
            started += 1
        elif state == "skipped":
            skipped += 1
        else:
            why = note.get("why") or f"{note.get('executable', 'python')}: {state}"
            if str(why) not in not_started:
                not_started.append(str(why))
    return RunNotes(started, skipped, tuple(not_started))


def remove_report_dir(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def explain_no_startup(spans) -> str | None:
    """For ``analyze``: why a trace holds no ``model.startup`` span, when a launch span says."""
    for span in spans:
        started = span.attributes.get(semconv.LAUNCH_PROCESSES_STARTED)
        if started == 0 and not isinstance(started, bool):
            reasons = span.attributes.get(semconv.LAUNCH_PROCESSES_NOT_STARTED)
            if isinstance(reasons, (tuple, list)) and reasons:
                return f"the child process never started the plugin: {_one_line(reasons[0])}"
            return ("the child process never started the plugin: no Python process of the command ran "
                    "otel-coldstart's bootstrap")
    return None


def untraced_warnings(spans) -> list[str]:
    """For ``analyze``: one line per launch span whose command had processes that were not
    traced, when others were (with none traced, :func:`explain_no_startup` says it)."""
    lines = []
    for span in spans:
        started = span.attributes.get(semconv.LAUNCH_PROCESSES_STARTED)
        reasons = span.attributes.get(semconv.LAUNCH_PROCESSES_NOT_STARTED)
        if (isinstance(started, int) and not isinstance(started, bool) and started > 0
                and isinstance(reasons, (tuple, list)) and reasons):
            lines.append(f"{len(reasons)} Python process(es) of launch {_one_line(span.name)!r} were not traced: "
                         f"{_one_line(reasons[0])}")
    return lines


def _one_line(value, limit: int = 300) -> str:
    """A value read from a trace, fit for one terminal line (a hostile trace may hold anything)."""
    text = " ".join(str(value).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
