"""``offline``: ``HF_HUB_OFFLINE=1`` (or ``local_files_only=True``): the start-up asks the hub
nothing, every file comes from the local cache.

Every metadata request (``coldstart.download.metadata``: HEAD, repo info, revision
resolution) loses its own time. It assumes the files are on the node: where the start-up
fetched files, offline alone would fail, so this projects offline together with the files
pre-staged only for the requests (combine it with ``predownload``, or use ``all``).
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "the start-ups made no metadata request to the hub: nothing for offline mode to spare"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    requests = [s for s in b.spans if s.name == semconv.SPAN_DOWNLOAD_METADATA]
    if not requests:
        return out
    out.applies = True
    for span in requests:
        cap = b.own_ns(span)
        out.cuts.append(Cut(span.span_id, span.phase or semconv.PHASE_DOWNLOAD, cap, cap, ctx.of(span)))
    said.add("offline", "with HF_HUB_OFFLINE=1 the hub is never asked: every metadata request takes no time")
    fetched = [s for s in b.spans if s.name == semconv.SPAN_DOWNLOAD_FILE
               and verdicts.positive_int(s.attributes, semconv.DOWNLOAD_BYTES) > 0]
    if fetched:
        said.add("offline-needs-files", "{n} start-up(s) fetched files: offline mode needs them on the node "
                                        "first (with predownload); alone it would fail there")
    return out
