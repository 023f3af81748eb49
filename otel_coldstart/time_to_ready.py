"""Time to ready, live: how many seconds a start-up in flight has left, from where it is now
and how earlier start-ups of the same service went.

The in-flight monitor thread (inflight.py) reads the history once (``_history.py``: bounded,
never on the host's thread) and then, for each progress record and each collection of the
``model.startup.inflight.remaining`` gauge, asks :meth:`LiveEstimate.estimate` (a pure
function of the history and the board's snapshot: microseconds).

**Where it is, in each earlier start-up.** The freshest evidence that the earlier start-up
also has, tried in this order of recency: the spans of ours open now (innermost first) and
the span that ended last, each matched by its name, phase and file name (``coldstart.deserialize``
of ``model-00002-of-00004.safetensors``; of several matches, the occurrence nearest in time
from the start). Then:

- in an open span: what is left of it, plus the earlier start-up's time from that span's end
  to ready(). What is left is the earlier span's length less the time already in it (0 once
  it overran: the estimate then holds at the time after it), refined by checkpoint bytes:
  a file read with its own bytes read against its size, at its own pace so far (a cold file
  reads slower than a warm one, whatever the history did); a span that read checkpoint
  files in the earlier start-up (a ``phase("load")`` around the reads) by the bytes loaded
  against expected (the index's ``total_size``), at this start-up's pace through the span;
- after the span that ended last: the earlier start-up's time from that span's end to
  ready(), less the time since;
- with nothing matched: where the earlier start-up had read as many of its checkpoint
  bytes, else the elapsed time.

**Overrun** (issue 39): where this start-up has spent longer than the earlier one in the
same place (a step past its earlier length, the time after the last span past the earlier
time to ready(), the whole start-up past the earlier total), the rest of it is estimated as
the overrun so far (a step at twice its earlier length is expected to need as long again as
it overran: the longer past, the later ready(), never a count-down stuck at ~0 s) and the
estimate says so: ``overrun_s`` (the median over the earlier start-ups of how far past it
is, 0 where it is not), on the progress record (``coldstart.progress.overrun_s``) and the
``model.startup.inflight.overrun`` gauge.

**Over the earlier start-ups**: the median of what each one says (the newest
``_history.MAX_STARTUPS`` that reached ready(), of this host.type when any are).

**Limits** (docs/metrics.md): no earlier start-up of the service (a first start-up), no
estimate: the record says so and the gauge is absent; a changed checkpoint matches by file
name where it can and by the share of bytes otherwise; other hardware, another cache state
or another load is assumed to go as the history went, except inside file reads (their own
pace) and spans that read checkpoint bytes.
"""

from __future__ import annotations

import os
from typing import NamedTuple  # not dataclasses: see the imports of _history.py

from . import semconv
from ._history import STEP_END_S, STEP_KEY, STEP_START_S, EarlierStartup, History, Identity, read_history, step_key

MIN_PACE_S = 0.05  # time (and earlier time) inside a span before its pace is trusted
MIN_PACE_SHARE = 0.05  # bytes of a file read before its pace is trusted
PACE_BOUNDS = (0.25, 4.0)  # this start-up's pace through a span, against the earlier one's
MAX_BASIS_CHARS = 240


class Estimate(NamedTuple):
    remaining_s: float
    startups: int  # earlier start-ups it is from
    basis: str  # where this start-up was matched, in words
    overrun_s: float = 0.0  # how far past the earlier start-ups it is where it was matched (median)


class Sources(NamedTuple):
    """Where earlier start-ups are, and what makes them this service's (made on the monitor
    thread from the plain values the start-up handed it: nothing is read on the host's)."""

    directories: tuple
    identity: Identity
    own_file: str | None
    trace_id: str | None
    start_ns: int


class LiveEstimate:
    """The history of one start-up's service, and estimates from it."""

    def __init__(self, history: History | None, sources: Sources, note: str = "") -> None:
        self.history = history
        self.sources = sources
        self.note = note  # why there is no estimate, when there is none
        self._by_key = [_index(h) for h in (history.startups if history else ())]

    @classmethod
    def load(cls, sources: Sources) -> LiveEstimate:
        history = read_history(sources.directories, sources.identity, skip_paths=(sources.own_file,),
                               skip_trace=sources.trace_id)
        note = ""
        if not history.startups:
            service = sources.identity.service or "?"
            where = ", ".join(history.directories) or "no directory"
            note = (f"no estimate: no earlier start-up of service {service!r} that reached ready() in {where} "
                    "(a first start-up has no history)")
        return cls(history, sources, note[:MAX_BASIS_CHARS])

    @property
    def startups(self) -> int:
        return len(self.history.startups) if self.history else 0

    def estimate(self, snap) -> Estimate | None:
        """Seconds left to ready() for the start-up as ``snap`` shows it, or None."""
        history = self.history
        if history is None or not self._by_key:
            return None
        answers = [_remaining(h, index, snap, self.sources) for h, index in zip(history.startups, self._by_key)]
        remaining = _median([r for r, _, _ in answers])
        overrun = _median([o for _, _, o in answers])
        hows = [how for _, how, _ in answers]
        how = max(set(hows), key=hows.count)
        if overrun > 0:
            how += f", overrunning the earlier start-ups by {overrun:.1f} s"
        others = "" if history.same_host_type else " (of other host types: none of this one)"
        basis = f"{how}; {len(answers)} earlier start-up(s){others}"
        return Estimate(max(0.0, remaining), len(answers), basis[:MAX_BASIS_CHARS], max(0.0, overrun))

    def record_attributes(self, snap) -> dict:
        """The progress record's attributes: the estimate, or why there is none."""
        estimate = self.estimate(snap)
        if estimate is None:
            return {semconv.PROGRESS_REMAINING_HISTORY: 0, semconv.PROGRESS_REMAINING_BASIS: self.note}
        attrs = {semconv.PROGRESS_REMAINING_S: round(estimate.remaining_s, 3),
                 semconv.PROGRESS_REMAINING_HISTORY: estimate.startups,
                 semconv.PROGRESS_REMAINING_BASIS: estimate.basis}
        if estimate.overrun_s > 0:
            attrs[semconv.PROGRESS_OVERRUN_S] = round(estimate.overrun_s, 3)
        return attrs


def _rest(expected_s: float, spent_s: float) -> tuple[float, float]:
    """(what is left, how far past): ``expected_s`` less ``spent_s`` while within it; past it,
    the overrun so far, for both (see the module's docstring)."""
    if spent_s <= expected_s:
        return expected_s - spent_s, 0.0
    overrun = spent_s - expected_s
    return overrun, overrun


def _median(values: list) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _index(h: EarlierStartup) -> dict:
    """Where each key's steps are in ``h.steps``: key -> tuple of positions. Tuples of ints, not
    lists of steps: like the steps (see _history.STEP_KEY), they leave the garbage collector's
    lists at its first collection."""
    by_key: dict[tuple, list] = {}
    for position, step in enumerate(h.steps):
        by_key.setdefault(step[STEP_KEY], []).append(position)
    return {key: tuple(positions) for key, positions in by_key.items()}


def _nearest(h: EarlierStartup, positions, offset_s: float, field: int):
    """Of ``h``'s steps at ``positions``, the one whose ``field`` is nearest ``offset_s``."""
    if not positions:
        return None
    return min((h.steps[position] for position in positions), key=lambda step: abs(step[field] - offset_s))


def _describe(key: tuple) -> str:
    name, _, file = key
    return f"{name} ({file})" if file else name


def _remaining(h: EarlierStartup, by_key: dict, snap, sources: Sources) -> tuple[float, str, float]:
    """(seconds left, where it was matched, seconds past the earlier start-up there)."""
    start, now = sources.start_ns, snap.now_ns
    # (time, order, span): the open spans oldest first, so an inner span opened in the same
    # nanosecond as its parent comes after it; the span that ended last, at its end.
    evidence = [(entry.start_ns, order, entry) for order, entry in enumerate(snap.open)]
    last_done = getattr(snap, "last_done", None)
    if last_done is not None:
        evidence.append((last_done[2], -1, None))
    # Freshest first: the span opened last, or the one that ended last if that came later.
    for _, _, entry in sorted(evidence, key=lambda item: item[:2], reverse=True):
        if entry is None:  # the span that ended last
            if last_done is None:
                continue
            name, attributes, end_ns = last_done
            key = step_key(name, attributes.get(semconv.PHASE), attributes.get(semconv.FILE_PATH))
            step = _nearest(h, by_key.get(key), (end_ns - start) / 1e9, STEP_END_S)
            if step is not None:
                since = max(0.0, (now - end_ns) / 1e9)
                rest, overrun = _rest(max(0.0, h.total_s - step[STEP_END_S]), since)
                return rest, f"after {_describe(key)}", overrun
            continue
        key = step_key(entry.name, entry.phase, entry.attributes.get(semconv.FILE_PATH))
        step = _nearest(h, by_key.get(key), (entry.start_ns - start) / 1e9, STEP_START_S)
        if step is not None:
            in_step = max(0.0, (now - entry.start_ns) / 1e9)
            rest, how, overrun = _rest_of_step(h, step, entry, in_step, snap)
            return rest + max(0.0, h.total_s - step[STEP_END_S]), f"in {_describe(key)}{how}", overrun
    share = _loaded_share(h, snap)
    if share is not None and 0 < share < 1:
        return max(0.0, h.total_s - _time_at_share(h, share)), "by checkpoint bytes loaded", 0.0
    rest, overrun = _rest(h.total_s, snap.elapsed_s)
    return rest, "by elapsed time", overrun


def _rest_of_step(h: EarlierStartup, step, entry, in_step: float, snap) -> tuple[float, str, float]:
    step_start_s, step_end_s = step[STEP_START_S], step[STEP_END_S]
    length = step_end_s - step_start_s
    read = entry.file_read
    size = entry.attributes.get(semconv.FILE_SIZE)
    done = getattr(read, "bytes", 0) if read is not None else 0
    if isinstance(size, int) and isinstance(done, int) and 0 < size and MIN_PACE_SHARE * size <= done < size \
            and in_step >= MIN_PACE_S:
        return in_step * (size - done) / done, ", by its bytes read at its pace", max(0.0, in_step - length)
    share = _loaded_share(h, snap)
    inside = any(step_start_s <= r_start and r_end <= step_end_s for r_start, r_end, _ in h.reads)
    if inside and share is not None and 0 < share < 1:
        at = min(step_end_s, max(step_start_s, _time_at_share(h, share)))
        earlier = at - step_start_s
        if earlier >= MIN_PACE_S and in_step >= MIN_PACE_S:
            pace = min(PACE_BOUNDS[1], max(PACE_BOUNDS[0], in_step / earlier))
            return (step_end_s - at) * pace, f", by checkpoint bytes ({share:.0%}) at its pace", \
                max(0.0, in_step - length)
    rest, overrun = _rest(length, in_step)
    return rest, "", overrun


def _loaded_share(h: EarlierStartup, snap) -> float | None:
    """Checkpoint bytes loaded over expected: the index's total where there is one, else the
    bytes the earlier start-up read (the files opened so far say nothing of the whole)."""
    loaded = snap.bytes_loaded
    expected = snap.bytes_expected if snap.expected_source == semconv.EXPECTED_FROM_INDEX else None
    expected = expected or h.checkpoint_bytes
    if not expected or not isinstance(loaded, int):
        return None
    return min(1.0, loaded / expected)


def _time_at_share(h: EarlierStartup, share: float) -> float:
    """When the earlier start-up had read ``share`` of its checkpoint bytes (linear inside
    each file read)."""
    total = h.checkpoint_bytes
    target = share * total
    done = 0
    for start_s, end_s, nbytes in h.reads:
        if done + nbytes >= target:
            inside = (target - done) / nbytes if nbytes else 1.0
            return start_s + (end_s - start_s) * inside
        done += nbytes
    return h.reads[-1][1] if h.reads else 0.0


def sources_for(directories, resource: dict, own_file: str | None, trace_id: str | None,
                start_ns: int) -> Sources:
    service = resource.get("service.name")
    model = resource.get(semconv.MODEL_NAME)
    host_type = resource.get("host.type")
    identity = Identity(service if isinstance(service, str) else None, model if isinstance(model, str) else None,
                        host_type if isinstance(host_type, str) else None)
    return Sources(tuple(d for d in directories if d), identity, os.path.abspath(own_file) if own_file else None,
                   trace_id, start_ns)
