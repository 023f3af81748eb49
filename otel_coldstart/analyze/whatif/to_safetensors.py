"""``to-safetensors``: the pickle checkpoint (``torch.load``) converted to safetensors.

Each pickle file read (torch.save's zip or legacy format), for its whole time open, costs
what loading the same bytes as safetensors costs, loaded the way the trace used them: at the
rate of the safetensors files read with the same cache state in this start-up, else in the
other start-ups given (the same loader). Else, for a resident file, nothing: safetensors'
``load_file``/``safe_open`` map the file, so no byte is read in the load and each page is
taken from the page cache where it is first touched (the copy a loader makes next, which it
makes after ``torch.load`` too, from memory); for a file read from storage, its bytes at the
storage floor's cold read(2) rate (they still come from storage, on first touch). Not the
time ``torch.load`` spent reading the tensors' bytes (``coldstart.torch_load.storage_read_s``):
its zip reader is most of the pickle's cost (2.26 s of 2.48 s for 400 MB that safetensors
loaded in 0.07 s, on this project's 2-core machine), so it is what the lever removes.
"""

from __future__ import annotations

from collections import defaultdict

from ... import semconv
from ..breakdown import Breakdown, same_thread
from ._evidence import Assumptions, Concurrency, Evidence, LeverOutcome, children_by_parent, file_reads
from .prewarm import _share_cut

NOTHING = "no checkpoint file in these start-ups is a pickle (torch.save): nothing to convert"
PICKLE_FORMATS = (semconv.FORMAT_TORCH_ZIP, semconv.FORMAT_TORCH_LEGACY)


def pickle_reads(b: Breakdown):
    return [(span, shard) for span, shard in file_reads(b) if shard.format in PICKLE_FORMATS]


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    pickles = pickle_reads(b)
    if not pickles:
        return out
    out.applies = True
    own_rates = safetensors_rates([b])
    children = children_by_parent(b)
    missing = 0
    for span, shard in pickles:
        ideal = _as_safetensors_ns(shard, own_rates, ev, said)
        if ideal is None:
            missing += 1
            continue
        nested = [c for c in children.get(span.span_id, ()) if same_thread(c, span)]
        _share_cut(out, b, [span, *nested], span.busy_ns - ideal, ctx)
    if missing:
        out.unknown = (f"{missing} pickle file(s) read from storage without a rate to read them at as "
                       "safetensors: no safetensors file read from storage in the start-ups given and no storage "
                       "floor (otel-coldstart floor --json FILES > floor.json, given among the inputs)")
    return out


def _as_safetensors_ns(shard, own_rates: dict, ev: Evidence, said: Assumptions) -> int | None:
    state = "cold" if shard.cold else "warm"
    size = shard.size or 0
    rate = own_rates.get(shard.cold)
    if rate:
        said.add(f"st-own-{state}", f"{state} pickle files (their whole time open) at the rate of the start-up's "
                                    f"own {state} safetensors files ({{rates}}): the same loader, another format", rate)
        return int(size / rate * 1e9)
    rate = ev.safetensors_rates.get(shard.cold)
    if rate:
        said.add(f"st-pooled-{state}", f"{state} pickle files (their whole time open) at the rate of the {state} "
                                       "safetensors files of the other start-ups given ({rates}): {n} start-up{s} "
                                       "had none of its own", rate)
        return int(size / rate * 1e9)
    if not shard.cold:
        said.add("st-mapped", "resident pickle files loaded as safetensors take no time of their own: load_file "
                              "maps the file, and each page is taken from the page cache where it is first touched "
                              "(the copy a loader makes next, as it does after torch.load)")
        return 0
    floor = ev.floor
    rate = floor.cold_bytes_per_s if floor else None
    if floor is not None and rate:
        said.add("st-floor-cold", f"pickle files read from storage at the storage floor's cold read(2) rate "
                                  f"({{rates}}, {floor.source}): their bytes still come from storage, on first touch "
                                  "(no start-up given read safetensors files from storage)", rate)
        return int(size / rate * 1e9)
    return None


def safetensors_rates(results) -> dict[bool, float]:
    """Bytes per second of whole safetensors file reads, by cache state (True: cold or
    partial, False: resident)."""
    size: dict[bool, int] = defaultdict(int)
    time: dict[bool, int] = defaultdict(int)
    for b in results:
        for span, shard in file_reads(b):
            if shard.format != semconv.FORMAT_SAFETENSORS:
                continue
            if not shard.cold and shard.state != semconv.CACHE_WARM:
                continue  # cache state unknown: neither reference
            size[shard.cold] += shard.size or 0
            time[shard.cold] += span.duration_ns
    return {cold: size[cold] / (time[cold] / 1e9) for cold in size if size[cold] > 0 and time[cold] > 0}
