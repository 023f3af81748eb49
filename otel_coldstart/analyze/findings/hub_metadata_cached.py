"""Metadata round trips on a fully cached start: every file came from the local cache, yet
the start-up still asked the hub (repo info, revision resolution, HEADs). A slow or
unreachable hub delays every such start, and a hub outage can fail it.

Estimate: the ``offline`` lever's projection (analyze/whatif/offline.py, the figure
``whatif --lever offline`` gives): every metadata request takes no time.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..downloads import downloads
from ..units import format_seconds
from ..whatif import OFFLINE
from ._finding import Finding, claim, share_text, weight
from ._levers import lever_saving


def check(breakdown: Breakdown, floor=None, given=None) -> list[Finding]:
    found = downloads(breakdown)
    total = breakdown.duration_ns
    if found is None or found.fetched or not found.items or not found.metadata_requests or total <= 0:
        return []
    hub = [i for i in found.items if i.source == semconv.DOWNLOAD_SOURCE_HF]
    if not hub:
        return []
    waiting = min(found.metadata_ns, total)
    share = waiting / total
    projected = lever_saving(breakdown, OFFLINE, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="hub_metadata_cached", phase=semconv.PHASE_DOWNLOAD,
        title=f"every file was cached, yet the start-up made {found.metadata_requests} request(s) to the hub: "
              f"{format_seconds(waiting).strip()}, {share_text(waiting, total)}"
              + ("; a slow hub is the bottleneck" if weight(share) == "major" else ""),
        evidence=[f"{found.cached_files} file(s) from the local cache, 0 B from the network",
                  f"{found.metadata_requests} metadata request(s) (repo info, revision, HEAD): "
                  f"{format_seconds(waiting)} ({share_text(waiting, total)})"],
        lever="set HF_HUB_OFFLINE=1 (or local_files_only=True, or pin revision= to a commit hash) on nodes "
              "whose cache is pre-staged; `whatif --lever offline` projects it",
        saving_ns=saving, estimate=projected.estimate, share=share,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_DOWNLOAD))] if saving else [],
    )]
