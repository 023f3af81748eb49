"""``--by ATTRIBUTE`` as ``capacity``, ``whatif`` and ``compare`` take it: a resource or
root-span attribute (repeatable), refused in one line when no start-up has it."""

from __future__ import annotations

from collections.abc import Sequence

from ..analyze.breakdown import Breakdown
from ..analyze.capacity import known_keys
from .errors import EXIT_USAGE, CliError


def check_by(results: Sequence[Breakdown], keys: Sequence[str] | None) -> None:
    if keys:
        known = known_keys(results)
        missing = [key for key in keys if key not in known]
        if missing:
            raise CliError(f"--by {', '.join(missing)}: no start-up has this attribute; known keys: "
                           f"{', '.join(known) or '(none)'}", EXIT_USAGE)
