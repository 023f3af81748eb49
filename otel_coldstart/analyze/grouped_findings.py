"""Findings over many like start-ups, each said once (issue 39, item 11): ``analyze DIR`` over
50 start-ups of one service prints "in 50 of 50 start-ups" once per rule, not 50 findings.

A group is one rule about one phase. Its words are those the start-ups' findings share, with
each figure that differs shown as the range seen ("2.10 s–2.45 s"); where the findings'
wording differs beyond their figures, the group shows the words of the start-up with the
largest saving and says so. Pure: findings in, groups out; each start-up's own findings stay
as they are (JSON keeps them all).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# A figure: a number with the unit that follows it, if any ("1.20 s", "36%", "8.7x", "128.0 MiB").
_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(\s?(?:ns|µs|us|ms|s|KiB|MiB|GiB|TiB|kB|MB|GB|B/s|B|%|x)\b|%)?")
_SCALE = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9,
          "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


@dataclass(frozen=True)
class FindingGroup:
    rule: str
    phase: str | None
    findings: tuple  # the start-ups' own findings, largest saving first
    startups: int  # start-ups given (the "of N")
    title: str
    evidence: tuple[str, ...]
    lever: str
    same_words: bool  # False: the words are the largest saving's start-up's

    @property
    def count(self) -> int:
        return len({(f.trace_id, f.rank) for f in self.findings})

    @property
    def savings_ns(self) -> tuple[int, int]:
        values = [f.saving_ns for f in self.findings]
        return min(values), max(values)


def several_startups(startups: Sequence) -> bool:
    """Whether a report's findings are grouped: more than one start-up (each rank of a
    multi-process start-up is one)."""
    return len({(b.trace_id, b.root.span_id) for b in startups}) > 1


def group(findings: Sequence, startups: int) -> list[FindingGroup]:
    """The findings grouped by rule and phase, the group with the largest saving first."""
    by_key: dict[tuple, list] = {}
    for f in findings:
        by_key.setdefault((f.rule, f.phase), []).append(f)
    groups = []
    for (rule, phase), members in by_key.items():
        members = sorted(members, key=lambda f: -f.saving_ns)
        title, same_title = ranged([f.title for f in members])
        lever, same_lever = ranged([f.lever for f in members])
        evidence, same_evidence = _ranged_lines([f.evidence for f in members])
        groups.append(FindingGroup(rule, phase, tuple(members), startups, title, evidence, lever,
                                   same_title and same_lever and same_evidence))
    return sorted(groups, key=lambda g: (-g.savings_ns[1], -g.count, g.rule))


def ranged(texts: Sequence[str]) -> tuple[str, bool]:
    """One text for many that differ only in their figures, each differing figure shown as
    the range seen; where the words differ, the first text and False."""
    first = texts[0]
    skeleton = _skeleton(first)
    if any(_skeleton(t) != skeleton for t in texts[1:]):
        return first, False
    figures = [_FIGURE.findall(t) for t in texts]
    pieces = _FIGURE.split(first)
    # re.split with two groups: text, number, unit, text, number, unit, ..., text
    out = [pieces[0]]
    for index in range(len(figures[0])):
        seen = [(float(fig[index][0]), fig[index][0] + (fig[index][1] or "")) for fig in figures]
        low = min(seen, key=lambda v: _value(v))
        high = max(seen, key=lambda v: _value(v))
        out.append(low[1] if low[1] == high[1] else f"{low[1]}–{high[1]}")
        out.append(pieces[3 * index + 3])
    return "".join(out), True


def _ranged_lines(evidence: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], bool]:
    if any(len(lines) != len(evidence[0]) for lines in evidence):
        return tuple(evidence[0]), False
    lines, same = [], True
    for index in range(len(evidence[0])):
        line, alike = ranged([lines_of[index] for lines_of in evidence])
        lines.append(line)
        same = same and alike
    return tuple(lines), same


def _skeleton(text: str) -> str:
    """The text with every figure replaced by its unit's dimension (time, bytes, other): "900.0
    ms" and "1.20 s" are the same kind of figure."""
    return _FIGURE.sub(lambda m: "#" + _dimension((m.group(2) or "").strip()), text)


def _dimension(unit: str) -> str:
    if unit in ("ns", "µs", "us", "ms", "s"):
        return "t"
    if unit in ("B", "kB", "MB", "GB", "KiB", "MiB", "GiB", "TiB"):
        return "b"
    return unit


def _value(seen: tuple[float, str]) -> float:
    number, text = seen
    unit = text[len(text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZµ/%")):].strip()
    return number * _SCALE.get(unit, 1)
