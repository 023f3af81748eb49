"""Labels that keep what tells names apart when a name is too long for its column.

Forty-eight shards named ``<100 shared characters>-00017-of-00048.safetensors`` cut to their
first 46 characters read as one name 48 times. Here the cut goes in the middle: a label
keeps the start of the name, the part where it differs from its siblings (widened to the
whole number there: the shard number), and its end (the extension); what is left out
becomes "…". The full name stays where there is room for it: the tooltip, the HTML files
table, the JSON report.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

ELLIPSIS = "\u2026"
MIN_HEAD = 4  # characters of the start kept, so a label still reads as the name it is
END = 24  # characters of a shared end kept ("-of-00048.safetensors" and the extension)


def _shared(a: str, b: str) -> int:
    """Length of the common prefix of two strings."""
    return len(os.path.commonprefix([a, b]))


def _nearest_shared(names: Sequence[str]) -> dict[str, int]:
    """For each name, the longest prefix it shares with any other name: with its neighbours in
    sorted order, so 2,000 files cost a sort, not 4 million comparisons. Against its nearest
    sibling, not all of them: one other file beside 48 shards (an adapter, a draft model)
    shares no prefix with them, and made every shard's middle the whole name."""
    ordered = sorted(set(names))
    shared = dict.fromkeys(ordered, 0)
    for a, b in zip(ordered, ordered[1:]):
        length = _shared(a, b)
        shared[a] = max(shared[a], length)
        shared[b] = max(shared[b], length)
    return shared


def _widen_to_word(name: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) widened to whole runs of digits or letters at both edges: "17" of
    "00017" becomes "00017"."""
    def same(a: str, b: str) -> bool:
        return (a.isdigit() and b.isdigit()) or (a.isalpha() and b.isalpha())
    while 0 < start < len(name) and same(name[start - 1], name[start]):
        start -= 1
    while 0 < end < len(name) and same(name[end - 1], name[end]):
        end += 1
    return start, end


def shorten(name: str, width: int, siblings: Sequence[str] = ()) -> str:
    """``name`` in at most ``width`` characters, keeping what tells it apart from
    ``siblings`` (the other names shown beside it) and its end."""
    if len(name) <= width:
        return name
    others = [s for s in siblings if s != name]
    prefix = _nearest_shared([name, *others])[name] if others else 0
    suffix = _nearest_shared([n[::-1] for n in (name, *others)])[name[::-1]] if others else 0
    return _cut(name, width, prefix, suffix, bool(others))


def _cut(name: str, width: int, prefix: int, suffix: int, has_siblings: bool) -> str:
    """``name`` in ``width`` characters, keeping what lies between the ``prefix`` and
    ``suffix`` it shares with its nearest siblings (the distinct middle) and its end."""
    if width <= MIN_HEAD + 2:
        return name[:max(0, width - 1)] + ELLIPSIS
    prefix = min(prefix, len(name))
    suffix = min(suffix, len(name) - prefix)
    start, end = _widen_to_word(name, prefix, len(name) - suffix)
    if not has_siblings or end <= start:
        head = max(MIN_HEAD, (width - 1) // 3)  # no siblings: the start, then as much of the end as fits
        return name[:head] + ELLIPSIS + name[len(name) - (width - 1 - head):]
    tail_start = max(end, len(name) - min(suffix, END))  # the end of the name, at most END of it
    middle = name[start:end]
    tail = name[tail_start:]
    joined = middle + (tail if tail_start == end else ELLIPSIS + tail)
    head_room = width - 1 - len(joined)
    if start <= head_room:  # the start reaches the differing part: no cut before it
        return name[:start] + joined if start + len(joined) <= width else name[:head_room] + ELLIPSIS + joined
    if head_room >= MIN_HEAD:
        return name[:head_room] + ELLIPSIS + joined
    # The differing part itself is too long: keep its start and the very end.
    room = width - 2 - MIN_HEAD - min(len(tail), END // 2)
    if room <= 0:
        return name[:MIN_HEAD] + ELLIPSIS + name[len(name) - (width - 1 - MIN_HEAD):]
    return name[:MIN_HEAD] + ELLIPSIS + middle[:room] + ELLIPSIS + name[len(name) - min(len(tail), END // 2):]


def distinct_labels(names: Sequence[str], width: int) -> list[str]:
    """Each of ``names`` shortened to ``width`` against the others."""
    unique = list(dict.fromkeys(names))
    if all(len(n) <= width for n in unique):
        return list(names)
    if len(unique) < 2:
        return [shorten(n, width) for n in names]
    prefixes = _nearest_shared(unique)
    suffixes = _nearest_shared([n[::-1] for n in unique])
    labels = {n: n if len(n) <= width else _cut(n, width, prefixes[n], suffixes[n[::-1]], True) for n in unique}
    return [labels[n] for n in names]
