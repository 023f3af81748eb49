"""Start-up budgets for CI: ``total=90s``, ``h2d=10s``, ``unattributed=5s``. Pure: specs in,
violations out; the CLI turns violations into an exit code (docs/cli.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import semconv
from .breakdown import TOTAL, Breakdown
from .units import format_seconds, parse_duration_ns


@dataclass(frozen=True)
class Violation:
    trace_id: str
    rank: int | None
    key: str  # total | unattributed | a phase name
    limit_ns: int
    actual_ns: int

    def describe(self) -> str:
        rank = f" rank {self.rank}" if self.rank is not None else ""
        return (f"{self.key} {format_seconds(self.actual_ns)} > budget {format_seconds(self.limit_ns)} "
                f"(trace {self.trace_id}{rank})")


def parse_budget_specs(specs: Iterable[str]) -> dict[str, int]:
    """``KEY=DURATION`` strings into nanoseconds; ValueError with a one-line reason."""
    budget: dict[str, int] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"budget {spec!r} is not KEY=DURATION (e.g. total=90s)")
        budget[key] = parse_duration_ns(value)
    return budget


def parse_budget_file(text: str) -> dict[str, int]:
    """A JSON object ``{"total": "90s", "h2d": 10}`` (numbers are seconds) or lines of
    ``KEY=DURATION`` with ``#`` comments."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except RecursionError:
            raise ValueError("budget file is nested too deeply to be a budget") from None
        except ValueError as exc:
            raise ValueError(f"budget file is not valid JSON ({exc})") from None
        specs = []
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError(f"budget {key!r}: expected a duration, got {type(value).__name__}")
            specs.append(f"{key}={value}")
        return parse_budget_specs(specs)
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return parse_budget_specs(line for line in lines if line)


def unknown_budget_keys(budget: dict[str, int], known_phases: Iterable[str]) -> list[str]:
    """Keys that name nothing: not total, not unattributed, not a built-in phase and not a
    phase seen in the traces. A typo (``totl``, ``deserialise``) would be a gate that never
    fires, so the CLI refuses it."""
    valid = set(valid_budget_keys(known_phases))
    return sorted(k for k in budget if k not in valid)


def valid_budget_keys(known_phases: Iterable[str]) -> list[str]:
    return [TOTAL, semconv.UNATTRIBUTED] + sorted(set(semconv.BUILTIN_PHASES) | set(known_phases))


def check_budgets(results: Sequence[Breakdown], budget: dict[str, int]) -> list[Violation]:
    violations = []
    for b in results:
        for key, limit in sorted(budget.items()):
            actual = b.time_of(key)
            if actual > limit:
                violations.append(Violation(b.trace_id, b.rank, key, limit, actual))
    return violations
