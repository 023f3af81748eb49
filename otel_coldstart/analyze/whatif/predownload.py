"""``predownload``: every file the start-up fetched is already on the node (pre-staged onto
it or a volume, or baked into the image), as on a node whose cache was filled before.

Each fetched file's span (``coldstart.download.file`` with network bytes) loses its own
time, and so do the metadata requests made for that file (its HEAD, nested under it): a
file found in the cache costs a stat or two. A ``snapshot_download`` that fetched files
loses its own time too (it waits for its worker threads' files). What stays: the requests
not tied to one file (repo info, revision resolution: ``--lever offline`` takes those), the
files found in the cache, and everything after the download (the reads: from the page
cache the download had just filled, or from storage; said). The thread that called
``snapshot_download`` only waits while its workers fetch: the start-up shortens by that whole
wait, and the workers' files are counted there, not again beside it.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "the start-ups fetched nothing over the network (every file was in the local cache): nothing to pre-stage"


def _fetched(span) -> bool:
    nbytes = span.attributes.get(semconv.DOWNLOAD_BYTES)
    return isinstance(nbytes, int) and nbytes > 0


def _parent(b: Breakdown, span_id: str):
    return next(s for s in b.spans if s.span_id == span_id)


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    files = [s for s in b.spans if s.name == semconv.SPAN_DOWNLOAD_FILE and _fetched(s)]
    if not files:
        return out
    out.applies = True
    fetched_ids = {s.span_id for s in files}
    snapshots = {s.span_id: s for s in b.spans if s.name == semconv.SPAN_DOWNLOAD_SNAPSHOT
                 and any(f.parent_id == s.span_id for f in files)}
    tied = [s for s in b.spans if s.name == semconv.SPAN_DOWNLOAD_METADATA and s.parent_id in fetched_ids]
    for span in [*files, *tied, *snapshots.values()]:
        cap = b.own_ns(span)
        if span.span_id in snapshots:
            # The calling thread only waits for its workers' files: the start-up is shorter by
            # that whole wait, whatever else ran beside it.
            concurrency = 1.0
        elif span.parent_id in snapshots or (span.parent_id in fetched_ids and
                                             _parent(b, span.parent_id).parent_id in snapshots):
            # A worker's file (and its HEAD): the time the snapshot waited for, shortened there.
            concurrency = float("inf")
        else:
            concurrency = ctx.of(span)
        out.cuts.append(Cut(span.span_id, span.phase or semconv.PHASE_DOWNLOAD, cap, cap, concurrency))
    said.add("predownload", "the files fetched are on the node already: their transfers, their own metadata "
                            "requests and the snapshot waits for them take no time; requests not tied to a file "
                            "(repo info, revision) stay (--lever offline takes them)")
    if any(s.phase == semconv.PHASE_DESERIALIZE for s in b.spans):
        said.add("predownload-reads", "the reads after it stay as measured: the page cache the download filled "
                                      "may be cold on a pre-staged node (prewarm projects that)")
    return out
