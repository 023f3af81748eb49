"""A download inside the start-up: weights fetched over the network (the hub, S3) before
they could be read, on the path of every cold start of a new node or pod.

Estimate: the ``predownload`` lever's projection (analyze/whatif/predownload.py, the figure
``whatif --lever predownload`` gives): the fetched files and their own metadata requests
take no time; the requests not tied to a file stay (see hub_metadata_cached for those).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..downloads import downloads, union_ns
from ..units import format_bytes, format_rate, format_seconds
from ..whatif import PREDOWNLOAD
from ._finding import Finding, claim, share_text, weight
from ._levers import lever_saving


def fetch_ns(found) -> int:
    """Wall time with a file being fetched (not found in the cache)."""
    return union_ns((item.start_ns, item.end_ns) for item in found.fetched)


def check(breakdown: Breakdown, floor=None, given=None) -> list[Finding]:
    found = downloads(breakdown)
    total = breakdown.duration_ns
    if found is None or not found.fetched or found.bytes <= 0 or total <= 0:
        return []
    fetching = min(fetch_ns(found), total)
    share = fetching / total
    sources = sorted({item.source or "?" for item in found.fetched})
    hosts = sorted({item.host for item in found.fetched if item.host})
    evidence = [f"{len(found.fetched)} file(s), {format_bytes(found.bytes)} fetched from "
                f"{', '.join(hosts) or 'the network'} ({', '.join(sources)}) in {format_seconds(fetching)}"
                f" ({share_text(fetching, total)})"]
    if found.throughput:
        evidence.append(f"{format_rate(found.throughput)} over the time files were fetched")
    if found.cached_files:
        evidence.append(f"{found.cached_files} file(s) were already in the local cache")
    projected = lever_saving(breakdown, PREDOWNLOAD, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="download_in_startup", phase=semconv.PHASE_DOWNLOAD,
        title=f"the start-up downloads its weights: {format_bytes(found.bytes)} in "
              f"{format_seconds(fetching).strip()}, {share_text(fetching, total)}"
              + ("; the download is the bottleneck" if weight(share) == "major" else ""),
        evidence=evidence,
        lever="pre-stage the weights onto the node or a volume (an init container or DaemonSet running "
              "`hf download` / `aws s3 sync` into HF_HOME), bake them into the image, or stream them "
              "(Run:ai Model Streamer); `otel-coldstart whatif --lever predownload` projects the start-up "
              "without the download",
        saving_ns=saving, estimate=projected.estimate, share=share,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_DOWNLOAD))] if saving else [],
    )]
