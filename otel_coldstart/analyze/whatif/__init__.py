"""What if a lever were pulled: the projected p50/p95 start-up, total and per phase, for each
lever, computed from the trace's own evidence and said in words (docs/analysis.md, "What if").

Pure functions over :class:`~..breakdown.Breakdown` records. One module per lever
(``prewarm``, ``serving_dtype``, ``pinned``, ``compile_cache``, ``fewer_captures``, ``bytecode``,
``prewarm_imports``; each
docstring states its model): ``cut(breakdown, ...)`` returns the time the lever takes out of
which spans, never more than a span's own time (``Breakdown.self_ns``: its busy time less
that of its phased children on the same thread), and the assumptions it made; ``NOTHING`` is what it says when
the start-ups hold nothing for it. ``_evidence`` gathers what the levers learn from every
start-up given. This module projects: a start-up's projected phase is its busy time less its
cuts, its projected total its measured total less each cut divided by the number of threads
that had work while the cut's span ran (one for one in a single-threaded start-up); every
other second stays as measured. ``all`` is every lever that applies together: on each span
their cuts add up to at most its own time, so no second is claimed twice.

Start-ups that did not reach ready() have no total to project: they are left out (and said
so), though their spans still count as evidence (a pinned rate, a cache hit).

``until=FIRST_TOKEN`` (``whatif --until first-token``) projects each start-up to its first
token: ready() plus its first request as measured (a ``first_request`` row; no lever changes
it, and the wait for it after ready() is left out, as ``capacity --until first-token`` does);
start-ups without a first token are left out with why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..breakdown import Breakdown
from ..capacity import FIRST_TOKEN, MIN_FOR_P95, READY, no_first_token_reason
from ..stats import percentile
from ..units import format_seconds
from . import (
    bytecode,
    compile_cache,
    fewer_captures,
    offline,
    pinned,
    predownload,
    prewarm,
    prewarm_imports,
    serving_dtype,
    to_safetensors,
)
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome, Options, gather
from .fewer_captures import default_keep

__all__ = ["ALL", "LEVERS", "Options", "Projection", "Quantiles", "Saving", "Summary", "WhatIf", "default_keep",
           "evidence", "project", "saving", "summarize"]

PREWARM = "prewarm"
SERVING_DTYPE = "serving-dtype"
PINNED = "pinned"
COMPILE_CACHE = "compile-cache"
FEWER_CAPTURES = "fewer-captures"
TO_SAFETENSORS = "to-safetensors"
BYTECODE = "bytecode"
PREWARM_IMPORTS = "prewarm-imports"
ALL = "all"
PREDOWNLOAD = "predownload"  # issue 37: the weights on the node before the start-up
OFFLINE = "offline"  # HF_HUB_OFFLINE=1: no metadata requests to the hub
LEVERS = (PREWARM, SERVING_DTYPE, PINNED, COMPILE_CACHE, FEWER_CAPTURES, TO_SAFETENSORS, BYTECODE, PREWARM_IMPORTS,
          PREDOWNLOAD, OFFLINE)
UNATTRIBUTED = "unattributed"
_MODULES = {PREWARM: prewarm, SERVING_DTYPE: serving_dtype, PINNED: pinned, COMPILE_CACHE: compile_cache,
            FEWER_CAPTURES: fewer_captures, TO_SAFETENSORS: to_safetensors, BYTECODE: bytecode,
            PREWARM_IMPORTS: prewarm_imports, PREDOWNLOAD: predownload, OFFLINE: offline}


@dataclass(frozen=True)
class Quantiles:
    p50_ns: int
    p95_ns: int


@dataclass(frozen=True)
class Summary:
    """p50/p95 of the start-up and of each phase (``unattributed`` included) over a set."""

    n: int
    total: Quantiles
    phases: dict[str, Quantiles]


@dataclass(frozen=True)
class Projection:
    lever: str
    summary: Summary | None  # None: not estimated
    saving_p50_ns: int | None
    assumptions: tuple[str, ...]
    not_estimated: str | None = None  # why, when summary is None
    changed: int = 0  # start-ups the lever changed


@dataclass(frozen=True)
class WhatIf:
    baseline: Summary
    levers: tuple[Projection, ...]
    left_out: tuple[str, ...] = ()  # start-ups that did not reach ready()
    notes: tuple[str, ...] = ()


def _quantiles(values: Sequence[int]) -> Quantiles:
    return Quantiles(int(percentile(values, 0.5)), int(percentile(values, 0.95)))


def _phase_values(b: Breakdown) -> dict[str, int]:
    values = {p.phase: p.busy_ns for p in b.phases}
    values[UNATTRIBUTED] = b.unattributed_ns
    return values


def summarize(per_startup: Sequence[tuple[int, dict[str, int]]]) -> Summary:
    """p50/p95 of (total, {phase: ns}) pairs; a phase a start-up lacks counts as 0 there."""
    names = sorted({name for _, phases in per_startup for name in phases})
    return Summary(len(per_startup), _quantiles([total for total, _ in per_startup]),
                   {name: _quantiles([phases.get(name, 0) for _, phases in per_startup]) for name in names})


def _apply(b: Breakdown, cuts: Sequence[Cut]) -> tuple[int, dict[str, int]]:
    """The start-up's projected (total, phases): cuts merged per span (at most its own
    time), each shortening the start-up by its time over the threads busy beside it."""
    total, phases, _ = _apply_parts(b, cuts)
    return total, phases


def _apply_parts(b: Breakdown, cuts: Sequence[Cut]) -> tuple[int, dict[str, int], dict[str, int]]:
    """``_apply``, with the start-up time each span's cuts take off (span id -> ns)."""
    per_span: dict[str, Cut] = {}
    for cut in cuts:
        held = per_span.get(cut.span_id)
        if held is None:
            per_span[cut.span_id] = Cut(cut.span_id, cut.phase, min(cut.ns, cut.cap_ns), cut.cap_ns, cut.concurrency)
        else:
            held.ns = min(held.cap_ns, held.ns + cut.ns)
    phases = _phase_values(b)
    parts: dict[str, int] = {}
    for cut in per_span.values():
        taken = cut.ns
        if cut.phase in phases:
            taken = min(cut.ns, phases[cut.phase])
            phases[cut.phase] -= taken
        parts[cut.span_id] = int(taken / cut.concurrency)
    return max(0, b.duration_ns - sum(parts.values())), phases, parts


def _threads_note(results: Sequence[Breakdown], cuts: dict[int, list[Cut]], said: Assumptions) -> None:
    for index in range(len(results)):
        said.startup = index
        if any(c.concurrency > 1.0 and c.ns for c in cuts.get(index, ())):
            said.add("threads", "time saved in work that ran beside other threads' work shortens the start-up by "
                                "that time over the number of threads busy then (they shrink alike, or still hold "
                                "it up)")


def _to_first_token(b: Breakdown, projected: tuple[int, dict[str, int]]) -> tuple[int, dict[str, int]]:
    """A projected (total, phases) carried on to the first token: its first request added as
    measured (the wait for it after ready() left out)."""
    total, phases = projected
    duration = b.first_request.duration_ns if b.first_request is not None else None
    if duration is None:  # project() keeps only start-ups with a first token
        raise ValueError("a start-up without a first token has no time to first token to project")
    return total + duration, {**phases, FIRST_REQUEST_ROW: duration}


FIRST_REQUEST_ROW = "first_request"


def project(results: Sequence[Breakdown], levers: Sequence[str] | None = None,
            options: Options = Options(), until: str = READY) -> WhatIf:
    """The baseline and one projection per lever (``levers`` None: every lever that applies,
    and ``all`` when more than one does). ``results`` not ready are left out; with
    ``until=FIRST_TOKEN``, so are those without a first token."""
    if until == FIRST_TOKEN:
        ready = [b for b in results if no_first_token_reason(b) is None]
        left_out = tuple(f"{_left_out_line(b)}: {no_first_token_reason(b)}" for b in results
                         if no_first_token_reason(b) is not None)
        if not ready:
            raise ValueError("no start-up has a first token (mark it with otel_coldstart.first_request()): "
                             "there is no time to first token to project")
    else:
        ready = [b for b in results if b.ready]
        left_out = tuple(_left_out_line(b) for b in results if not b.ready)
    if not ready:
        raise ValueError("no start-up reached ready(): there is no start-up time to project")
    ev = gather(results, options)
    concurrency = [Concurrency(b) for b in ready]
    extend = _to_first_token if until == FIRST_TOKEN else (lambda _b, projected: projected)
    baseline = summarize([extend(b, (b.duration_ns, _phase_values(b))) for b in ready])
    notes = []
    if len(ready) < MIN_FOR_P95:
        notes.append(f"p95 of {len(ready)} start-up(s): fewer than {MIN_FOR_P95}, so it is close to the slowest "
                     "seen, not a percentile")
    if left_out and until == FIRST_TOKEN:
        notes.append(f"{len(left_out)} start-up(s) left out: no first token (no ready(), no first request, or one "
                     "that failed or never ended), so no time to first token to project")
    elif left_out:
        notes.append(f"{len(left_out)} start-up(s) left out: they did not reach ready(), so they have no start-up "
                     "time to project (their spans still count as evidence)")
    if until == FIRST_TOKEN:
        notes.append("to the first token: each start-up's first request is added as measured (no lever changes "
                     "it), the wait for it after ready() left out")
    asked = list(LEVERS) if levers is None else [lever for lever in levers if lever != ALL]
    want_all = levers is None or ALL in levers
    outcomes: dict[str, tuple[dict[int, LeverOutcome], Assumptions]] = {}
    for lever in (LEVERS if want_all else asked):
        said = Assumptions()
        per = {}
        for i, b in enumerate(ready):
            said.startup = i
            per[i] = _MODULES[lever].cut(b, concurrency[i], ev, said)
        outcomes[lever] = (per, said)
    projections = []
    for lever in asked:
        per, said = outcomes[lever]
        if levers is None and not any(o.applies for o in per.values()):
            continue  # without --lever: only the levers that apply
        projections.append(_projection(lever, ready, baseline, {i: (o,) for i, o in per.items()}, said,
                                       extend=extend))
    if want_all:
        applying = [lever for lever in LEVERS if any(o.applies for o in outcomes[lever][0].values())]
        if levers is not None or len(applying) > 1:
            said = Assumptions()
            for lever in applying:
                for sentence in outcomes[lever][1].sentences():
                    said.add(f"{lever}:{sentence}", f"{lever}: {sentence}")
            said.add("all", "levers that act on the same span add up to at most its own time: no second is "
                            "claimed twice")
            combined = {i: tuple(outcomes[lever][0][i] for lever in applying) for i in range(len(ready))}
            projections.append(_projection(ALL, ready, baseline, combined, said, applying, extend=extend))
    return WhatIf(baseline, tuple(projections), left_out, tuple(notes))


def _projection(lever: str, ready: Sequence[Breakdown], baseline: Summary,
                per: dict[int, tuple[LeverOutcome, ...]], said: Assumptions,
                members: Sequence[str] = (), extend=lambda _b, projected: projected) -> Projection:
    applies = [i for i, outcomes in per.items() if any(o.applies for o in outcomes)]
    if lever == ALL and not members:
        return Projection(lever, baseline, 0, ("no lever applies to these start-ups: nothing to change",))
    if not applies:
        return Projection(lever, baseline, 0, (_MODULES[lever].NOTHING,))
    unknown = {i: "; ".join(o.unknown for o in outcomes if o.unknown) for i, outcomes in per.items()}
    estimated = [i for i in applies if not unknown[i] or any(o.cuts for o in per[i])]
    if not estimated:
        reasons = sorted({unknown[i] for i in applies if unknown[i]})
        return Projection(lever, None, None, tuple(said.sentences()), "; ".join(reasons))
    cuts = {i: [c for o in outcomes for c in o.cuts] for i, outcomes in per.items()}
    _threads_note(ready, cuts, said)
    sentences = said.sentences()
    partial = sorted({unknown[i] for i in applies if unknown[i]})
    if partial:
        sentences.append("left as measured where it could not be estimated: " + "; ".join(partial))
    if lever == ALL:
        sentences.insert(0, "together: " + ", ".join(members))
    projected = summarize([extend(b, _apply(b, cuts.get(i, ()))) for i, b in enumerate(ready)])
    changed = sum(1 for i in range(len(ready)) if any(c.ns for c in cuts.get(i, ())))
    return Projection(lever, projected, baseline.total.p50_ns - projected.total.p50_ns, tuple(sentences),
                      changed=changed)


def _left_out_line(b: Breakdown) -> str:
    rank = f" rank {b.rank}" if b.rank is not None else ""
    return f"trace {b.trace_id}{rank}: {b.end_description} ({format_seconds(b.duration_ns)})"


# --- one start-up's saving: what a finding states (findings/*) --------------------------


@dataclass(frozen=True)
class Saving:
    """What one lever saves one start-up: ``whatif --lever LEVER`` on that start-up alone
    (with the same floor and the same other start-ups as evidence) projects exactly this."""

    lever: str
    applies: bool  # the start-up has what the lever acts on
    ns: int | None  # None: not estimated (see not_estimated)
    assumptions: tuple[str, ...] = ()
    not_estimated: str | None = None
    # span id -> the start-up time the lever takes off through that span (they add up to ns):
    # findings that share a lever state the parts about their own spans.
    parts: dict[str, int] = field(default_factory=dict)

    def part(self, span_ids) -> int:
        return sum(self.parts.get(span_id, 0) for span_id in span_ids)

    @property
    def estimate(self) -> str:
        """How the figure was made, for a finding's ``estimate``."""
        if not self.applies:
            return f"no saving: the {self.lever} lever does not apply ({_MODULES[self.lever].NOTHING})"
        if self.ns is None:
            return f"not estimated: {self.not_estimated}"
        return f"the {self.lever} lever's projection (otel-coldstart whatif --lever {self.lever}): " + \
            "; ".join(self.assumptions)


def saving(b: Breakdown, lever: str, ev: Evidence) -> Saving:
    """The time ``lever`` takes off start-up ``b``: its measured total less its projected
    total, as ``project`` computes it (the same cuts, the same arithmetic)."""
    said = Assumptions()
    outcome = _MODULES[lever].cut(b, Concurrency(b), ev, said)
    if not outcome.applies:
        return Saving(lever, False, 0)
    if outcome.unknown and not outcome.cuts:
        return Saving(lever, True, None, tuple(said.sentences()), outcome.unknown)
    _threads_note([b], {0: outcome.cuts}, said)
    total, _, parts = _apply_parts(b, outcome.cuts)
    sentences = said.sentences()
    if outcome.unknown:
        sentences.append("left as measured where it could not be estimated: " + outcome.unknown)
    return Saving(lever, True, max(0, b.duration_ns - total), tuple(sentences), parts=parts)
