"""Lazy weights: checkpoint files still mapped at ready() with pages never read (safetensors,
transformers 5 and ``torch.load(mmap=True)`` keep tensors backed by the file's pages), so the
first requests read them from storage (analyze/lazy.py says which, and what the first-use
follow-up saw after ready()). Nothing for a resident file or one whose tensors were copied.

Estimate: the unread bytes at the file's own cold read rate in this start-up (else the other
files', else the storage floor's cold rate). It is time of the first requests, not of the
start-up (``saves_first_requests``): pre-faulting moves it before ready(), where it may
overlap other work. An upper bound for the requests: an embedding table is read row by row as
tokens are served, so they pay for the rows they touch, over time.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..lazy import first_use_line, lazy_files
from ..units import format_bytes, format_seconds
from ._finding import Finding

LEVER = ("pre-fault the mapped files before ready(): read each one once (`cat FILE > /dev/null` or `vmtouch -t` "
         "before the server starts, or a thread of yours that reads them while the model is built), or run a "
         "warm-up forward pass before ready() (it reads only the embedding rows of its tokens); with transformers, "
         "from_pretrained(..., disable_mmap=True) reads each file whole")


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    files = lazy_files(breakdown, floor)
    if not files:
        return []
    unread = sum(f.unread_bytes for f in files)
    names = ", ".join(f.name for f in files[:4]) + (" ..." if len(files) > 4 else "")
    evidence = []
    for item in files[:4]:
        size = f" of {format_bytes(item.size)}" if item.size else ""
        evidence.append(f"{item.name}: {format_bytes(item.unread_bytes)}{size} out of the page cache at ready(), "
                        "the file still mapped (its tensors are backed by its pages)")
    if len(files) > 4:
        evidence.append(f"... and {len(files) - 4} more file(s)")
    rated = [f for f in files if f.rate]
    saving = sum(f.estimate_ns for f in rated)
    if rated:
        evidence.append(f"reading that at {rated[0].rate_basis} takes ~{format_seconds(saving)}")
    for item in files[:4]:
        seen = first_use_line(item)
        if seen is not None:
            evidence.append(seen)
    if rated:
        basis = (f"the first requests' time, not the start-up's: the unread bytes at {rated[0].rate_basis}"
                 + (" (each file at its own)" if len(rated) > 1 else "")
                 + "; pre-faulting moves that read before ready()")
    else:
        basis = files[0].rate_basis
    return [Finding.about(
        breakdown, rule="lazy_weights", phase=semconv.PHASE_DESERIALIZE,
        title=f"{format_bytes(unread)} of weights not read at ready() ({names}): the first requests read it "
              "from storage",
        evidence=evidence, lever=LEVER, saving_ns=saving, estimate=basis, saves_first_requests=True,
    )]
