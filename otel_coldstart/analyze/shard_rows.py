"""Which checkpoint reads a text or Markdown report lists, and one line for the rest (issue 39
item 14): a start-up that read 2,000 files printed 2,000 shard lines, and what mattered (the
cold ones, the slow ones) was somewhere in them. A long list keeps the reads that fail, the
cold and partial ones and the slowest, in read order, then "... and N more shards: ..." with
their bytes, summed time, the range of their times and their cache states. The JSON report
(and the HTML files table) keeps every read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .units import format_bytes, format_seconds

SHOWN = 12  # rows listed before a longer list is collapsed
COLLAPSE_OVER = SHOWN + 3  # never fold away only one to three rows: the line costs as much as they do


@dataclass(frozen=True)
class Rest:
    """The reads not listed."""

    count: int
    bytes: int | None  # None when no size is known
    busy_ns: int
    fastest_ns: int
    slowest_ns: int
    states: tuple[tuple[str, int], ...]  # (state, reads), most first

    def describe(self) -> str:
        size = f"{format_bytes(self.bytes)}, " if self.bytes is not None else ""
        spread = (format_seconds(self.fastest_ns) if self.fastest_ns == self.slowest_ns else
                  f"{format_seconds(self.fastest_ns)}-{format_seconds(self.slowest_ns)}")
        states = ", ".join(f"{n:,} {state}" for state, n in self.states)
        return (f"... and {self.count:,} more shard(s): {size}{format_seconds(self.busy_ns)} in all "
                f"({spread} each), {states}")


def _noteworthy(shard) -> bool:
    # A folded row is many small files' figures (patches/_folded_files.py): always listed.
    return shard.failed or shard.state in ("cold", "partial") or shard.folded


def shard_rows(shards: Sequence, limit: int = SHOWN) -> tuple[list, Rest | None]:
    """The reads to list, in read order, and the rest summed (None when all are listed).
    Failed, cold and partial reads come first (the slowest of them when there are more than
    ``limit``), then the slowest of the others, up to ``limit``."""
    if len(shards) <= max(limit, COLLAPSE_OVER):
        return list(shards), None
    by_time = sorted(range(len(shards)), key=lambda i: -shards[i].duration_ns)
    noteworthy = [i for i in by_time if _noteworthy(shards[i])][:limit]
    chosen = set(noteworthy)
    for index in by_time:
        if len(chosen) >= limit:
            break
        chosen.add(index)
    shown = [shards[i] for i in sorted(chosen)]
    rest = [shards[i] for i in range(len(shards)) if i not in chosen]
    sizes = [s.size for s in rest if s.size is not None]
    states: Counter = Counter()
    for s in rest:  # by file: a folded row counts each of its files under its own verdict
        if s.folded:
            states.update({state if state not in ("unknown",) else "cache ?": n for state, n in s.file_states})
        else:
            states["failed" if s.failed else (s.state or "cache ?")] += 1
    return shown, Rest(sum(s.files for s in rest), sum(sizes) if sizes else None, sum(s.duration_ns for s in rest),
                       min(s.duration_ns for s in rest), max(s.duration_ns for s in rest),
                       tuple(sorted(states.items(), key=lambda kv: (-kv[1], kv[0]))))
