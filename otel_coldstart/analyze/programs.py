"""Different programs under one service name (issue 39 item 12).

whatif, compare and capacity pool the start-ups they are given. Two programs that share a
``service.name`` (a server and its batch job, two models deployed under one name) were pooled
silently: their percentiles and projections described neither. A start-up's program is told
by its model name (``coldstart.model.name``) and its entry point (``process.command``, which
the plugin records on the root; ``process.executable.*`` where a resource detector gave them);
where those differ under one service name the commands say so, naming the programs and how
many start-ups each has, and suggest ``--by`` that attribute (whatif, compare and capacity).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from .. import semconv
from .breakdown import Breakdown
from .capacity import resource_value

PROGRAM_KEYS = (semconv.MODEL_NAME, semconv.PROCESS_COMMAND, "process.executable.path", "process.executable.name")
SHOWN = 4  # programs named per warning


def program_value(b: Breakdown, key: str) -> str | None:
    value = b.root.resource.get(key, b.root.attributes.get(key))
    return value if isinstance(value, str) and value else None


def mixed_programs(startups: Sequence[Breakdown], grouped_by: Sequence[str] = (),
                   command: str = "capacity") -> list[str]:
    """One warning per service whose start-ups come from different programs (the first of
    PROGRAM_KEYS that differs), unless the caller already groups by that key; the way out
    named is ``command --by`` that key (whatif, compare and capacity all take it)."""
    by_service: dict[str, list[Breakdown]] = defaultdict(list)
    for b in startups:
        service = b.root.resource.get("service.name")
        by_service[service if isinstance(service, str) else "(no service.name)"].append(b)
    warnings = []
    for service, group in sorted(by_service.items()):
        for key in PROGRAM_KEYS:
            values = Counter(program_value(b, key) for b in group)
            values.pop(None, None)
            if len(values) < 2:
                continue
            if key not in grouped_by:
                named = ", ".join(f"{value!r} ({n} start-up(s))" for value, n in values.most_common(SHOWN))
                more = f" and {len(values) - SHOWN} more" if len(values) > SHOWN else ""
                warnings.append(f"service {service!r} holds {len(values)} different programs by {key}: {named}{more}; "
                                f"they are pooled here as one: tell them apart with `{command} --by {key}`, or give "
                                "each program's traces separately")
            break
    return warnings


def split_by(startups: Sequence[Breakdown], keys: Sequence[str]) -> list[tuple[str, str, list[Breakdown]]]:
    """``(attribute, value, start-ups)`` for each value of each key, as ``capacity --by``
    groups: a resource or root-span attribute, one grouping per key (not their product),
    start-ups without it under ``(not set)``; values in order."""
    groups: list[tuple[str, str, list[Breakdown]]] = []
    for key in keys:
        by_value: dict[str, list[Breakdown]] = defaultdict(list)
        for b in startups:
            by_value[resource_value(b, key)].append(b)
        groups.extend((key, value, members) for value, members in sorted(by_value.items()))
    return groups
