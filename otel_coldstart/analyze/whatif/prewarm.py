"""``prewarm``: the page cache holds the checkpoint before the start-up.

Each checkpoint file read cold or partial (verdicts), for its whole time open (the copies a
loader makes while the file is open, as vLLM's ``param.copy_(f.get_tensor(name))`` inside
``safe_open``, wait for storage too), costs what a resident file of the same format cost: in
this start-up, else in the other start-ups given (the same loader), else its storage bytes at
the storage floor's warm read(2) rate (optimistic for a loader that copies or maps: said). The
saving is shared between the file's span and its copies by their own times. Storage reads in
other copies and casts (mmap page faults after the file was closed) come off at the cold rate
the start-up's own file reads ran at, else the floor's; the copy or cast itself stays.
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown, same_thread
from ..model import Span
from ._evidence import (
    Assumptions,
    Concurrency,
    Cut,
    Evidence,
    LeverOutcome,
    children_by_parent,
    file_reads,
    hidden_read_rate,
    hidden_reads,
    in_span_storage_bytes,
    warm_rates_by_format,
)

NOTHING = "every checkpoint file was already resident and no copy read from storage: nothing to pre-warm"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    cold = [(span, shard) for span, shard in file_reads(b) if shard.cold]
    hidden = hidden_reads(b)
    if not cold and not hidden:
        return out
    out.applies = True
    own_warm = warm_rates_by_format([b])
    children = children_by_parent(b)
    inside_files: set[str] = set()
    missing: set[str] = set()
    for span, shard in cold:
        fmt = shard.format
        # The file's whole window: a loader that copies each tensor while the file is open
        # (vLLM: param.copy_(f.get_tensor(name)) inside safe_open) waits for storage in those
        # copies, so the copies are part of reading the file.
        nested = [c for c in children.get(span.span_id, ()) if same_thread(c, span)]
        inside_files.update(c.span_id for c in nested)
        rate, reads_only = _warm_file_rate(fmt, own_warm, ev, said)
        if not rate:
            missing.add(fmt or "checkpoint")
            continue
        if not reads_only:  # a loader's rate over whole files: the same loader, the same work
            ideal = int((shard.size or 0) / rate * 1e9)
        else:
            # read(2)'s rate is per byte read: the bytes this read took from storage, now
            # from the page cache (a loader that maps the file reads only what it touches).
            ideal = int(in_span_storage_bytes(span, shard) / rate * 1e9)
            read_s = verdicts.number_value(span.attributes, semconv.TORCH_LOAD_STORAGE_READ_S)
            if read_s is not None:  # a pickle: the unpickling stays, only the reading is storage's
                ideal += max(0, span.duration_ns - int(read_s * 1e9))
            if nested:
                said.add("floor-nested", "files whose copies ran while they were open (the copies are part of the "
                                         "read): at read(2)'s rate their copying is taken as free, an optimistic "
                                         "projection (give a start-up with resident files, e.g. with --reference, "
                                         "for this loader's own rate)")
        _share_cut(out, b, [span, *nested], span.busy_ns - ideal, ctx)
    outside = [(span, read) for span, read in hidden if span.span_id not in inside_files]
    if outside:
        cold_rate = hidden_read_rate(b, ev, said)
        if cold_rate is None:
            missing.add("storage reads inside copies")
        else:
            for span, read in outside:
                cap = b.own_ns(span)
                out.cuts.append(Cut(span.span_id, span.phase or "", min(cap, int(read / cold_rate * 1e9)), cap,
                                     ctx.of(span)))
    if missing:
        out.unknown = (f"no rate to read {', '.join(sorted(missing))} at: no resident file of that format in the "
                       "start-ups given and no storage floor (otel-coldstart floor --json FILES > floor.json, "
                       "given among the inputs)")
    return out


def _warm_file_rate(fmt: str | None, own_warm: dict, ev: Evidence, said: Assumptions) -> tuple[float | None, bool]:
    """The rate a resident file of this format reads at, and whether it is read(2)'s alone:
    this start-up's own resident files, else those of the other start-ups given (the same
    loader), else the storage floor's warm read(2) rate."""
    rate = own_warm.get(fmt)
    if rate:
        said.add(f"warm-own-{fmt}", f"cold and partial {fmt or 'checkpoint'} files (their whole time open) at the "
                                    "rate of the start-up's own resident files of that format ({rates})", rate)
        return rate, False
    rate = ev.warm_rate_by_format.get(fmt)
    if rate:
        said.add(f"warm-pooled-{fmt}", f"cold and partial {fmt or 'checkpoint'} files (their whole time open) at the "
                                       "rate of the resident files of that format in the other start-ups given "
                                       "({rates}): {n} start-up{s} had none of its own", rate)
        return rate, False
    if ev.floor and ev.floor.warm_bytes_per_s:
        said.add("warm-floor", "the bytes cold and partial checkpoint files read from storage, read from the page "
                               f"cache at the storage floor's warm read(2) rate ({{rates}}, {ev.floor.source}) "
                               "instead: {n} start-up{s} had no resident file of the same format to learn from, "
                               "nor had the other start-ups given", ev.floor.warm_bytes_per_s)
        return ev.floor.warm_bytes_per_s, True
    return None, False


def _share_cut(out: LeverOutcome, b: Breakdown, spans: list[Span], cut_ns: int, ctx: Concurrency) -> None:
    """``cut_ns`` taken from ``spans`` (a file and the copies made while it was open) in
    proportion to their own times."""
    owns = [b.own_ns(s) for s in spans]
    total = sum(owns)
    cut_ns = max(0, min(cut_ns, total))
    for span, own_ns in zip(spans, owns):
        share = cut_ns * own_ns // total if total else 0
        out.cuts.append(Cut(span.span_id, span.phase or "", share, own_ns, ctx.of(span)))
