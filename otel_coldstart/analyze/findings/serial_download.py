"""A slow or serial download: files fetched one after another where they could overlap,
or a file fetched far slower than the start-up's other files.

Estimates: serial, the fetch time beyond the longest file (the files overlapped, each at
the rate it had); slow, the file's time beyond what it would take at the median rate of the
start-up's other files.
"""

from __future__ import annotations

import statistics

from ... import semconv
from ..breakdown import Breakdown
from ..downloads import downloads, union_ns
from ..units import format_bytes, format_rate, format_seconds
from ._finding import Finding, claim, share_text, weight

MIN_FILES = 2
MIN_SERIAL_NS = 500_000_000  # below half a second of fetching, overlap saves too little to say
SLOW_RATIO = 0.33  # a file under a third of the others' median rate
MIN_SLOW_BYTES = 1 << 20


def serial_runs(items) -> int:
    """How many fetched files started only after every earlier one had ended."""
    serial, latest_end = 0, None
    for item in sorted(items, key=lambda i: i.start_ns):
        if latest_end is not None and item.start_ns >= latest_end:
            serial += 1
        latest_end = item.end_ns if latest_end is None else max(latest_end, item.end_ns)
    return serial


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    found = downloads(breakdown)
    total = breakdown.duration_ns
    if found is None or total <= 0:
        return []
    fetched = [item for item in found.fetched if item.bytes > 0]
    out: list[Finding] = []
    wall = union_ns((i.start_ns, i.end_ns) for i in fetched)
    if len(fetched) >= MIN_FILES and serial_runs(fetched) == len(fetched) - 1 and wall >= MIN_SERIAL_NS:
        longest = max(i.duration_ns for i in fetched)
        saving = max(0, wall - longest)
        share = wall / total
        out.append(Finding.about(
            breakdown, rule="serial_download", phase=semconv.PHASE_DOWNLOAD,
            title=f"{len(fetched)} files downloaded one after another: {format_seconds(wall).strip()}, "
                  f"{share_text(wall, total)}" + ("; they could overlap" if weight(share) != "minor" else ""),
            evidence=[f"{len(fetched)} files, {format_bytes(sum(i.bytes for i in fetched))}, none overlapping "
                      f"another: {format_seconds(wall)} ({share_text(wall, total)})",
                      f"the longest file alone took {format_seconds(longest)}"],
            lever="fetch the files concurrently: snapshot_download(max_workers=...) once instead of "
                  "hf_hub_download per file, s3transfer's TransferConfig(max_concurrency=...), or a "
                  "parallel downloader (hf_xet's high-performance mode, `aws s3 sync`)",
            saving_ns=saving, estimate="the fetch time beyond the longest file (all overlapped)", share=share,
            claims=[claim(breakdown, saving, ("phase", semconv.PHASE_DOWNLOAD))],
        ))
    rated = [(i, rate) for i in fetched if (rate := i.throughput) and i.bytes >= MIN_SLOW_BYTES]
    for item, rate in rated if len(rated) >= 3 else ():
        others = statistics.median(r for i, r in rated if i is not item)
        if rate >= SLOW_RATIO * others:
            continue
        saving = max(0, item.duration_ns - int(item.bytes / others * 1e9))
        share = item.duration_ns / total
        out.append(Finding.about(
            breakdown, rule="slow_download", phase=semconv.PHASE_DOWNLOAD,
            title=f"{item.name} downloaded at {format_rate(rate).strip()}, "
                  f"{others / rate:.1f}x slower than the other files ({share_text(item.duration_ns, total)})",
            evidence=[f"{item.name}: {format_bytes(item.bytes)} in {format_seconds(item.duration_ns)}"
                      + (", resumed" if item.resumed else "")
                      + (f", {item.retries} retries ({', '.join(item.retry_reasons)})" if item.retries else ""),
                      f"the other {len(rated) - 1} files: median {format_rate(others)}"],
            lever="look at the path to that object (a cold CDN edge, a throttled or failing connection: "
                  "retries and resumes are on its span); pre-stage the weights on the node",
            saving_ns=saving, estimate="its time beyond the other files' median rate", share=share,
            claims=[claim(breakdown, saving, ("phase", semconv.PHASE_DOWNLOAD))],
        ))
    return out
