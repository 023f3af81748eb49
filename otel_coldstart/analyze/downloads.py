"""What a start-up fetched before it could read: its downloads, from the
``coldstart.download.*`` spans (patches/huggingface_hub.py, patches/s3.py).

Pure: plain records in, plain records out. One :class:`DownloadItem` per file (a file a
start-up both fetched and then looked up in the cache, as transformers does, is one item,
fetched); ``bytes`` are from the network, never the cache. A file the hub does not have
(``coldstart.download.not_found``, transformers probing an optional file) is no item; its
HEAD is a metadata request like the others.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from .. import semconv, verdicts
from .model import Span
from .units import format_bytes, format_rate, format_seconds, json_seconds


@dataclass(frozen=True)
class DownloadItem:
    key: str  # the local path, else source:repo/filename
    source: str | None
    repo: str | None
    filename: str | None
    path: str | None
    host: str | None
    cached: bool  # nothing of it came over the network
    bytes: int  # from the network
    cached_bytes: int
    expected_bytes: int | None
    start_ns: int
    end_ns: int
    transfer_s: float | None
    resumed: bool
    retries: int
    retry_reasons: tuple[str, ...]
    interrupted: bool
    transport: str | None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def throughput(self) -> float | None:
        """Network bytes per second of transfer (of the file span when no transfer time)."""
        seconds = self.transfer_s if self.transfer_s else self.duration_ns / 1e9
        return self.bytes / seconds if self.bytes and seconds > 0 else None

    @property
    def name(self) -> str:
        return self.filename or self.path or self.key


@dataclass(frozen=True)
class Downloads:
    items: tuple[DownloadItem, ...]  # in the order they started
    metadata_requests: int
    metadata_ns: int  # wall time with a metadata request open
    wall_ns: int  # wall time with any download span open (files, metadata, snapshots)
    start_ns: int  # the first download span's start
    end_ns: int  # the last one's end

    @property
    def files(self) -> int:
        return len(self.items)

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.items)

    @property
    def cached_files(self) -> int:
        return sum(1 for item in self.items if item.cached)

    @property
    def fetched(self) -> tuple[DownloadItem, ...]:
        return tuple(item for item in self.items if not item.cached)

    @property
    def throughput(self) -> float | None:
        """Network bytes over the wall time files were being fetched."""
        fetch_ns = union_ns((item.start_ns, item.end_ns) for item in self.fetched)
        return self.bytes / (fetch_ns / 1e9) if self.bytes and fetch_ns > 0 else None


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += max(0, stop - start)
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def _item(span: Span) -> DownloadItem:
    a = span.attributes
    path = a.get(semconv.DOWNLOAD_PATH)
    source, repo, filename = (verdicts.str_value(a, semconv.DOWNLOAD_SOURCE), verdicts.str_value(a, semconv.DOWNLOAD_REPO),
                              verdicts.str_value(a, semconv.DOWNLOAD_FILENAME))
    key = path if isinstance(path, str) else f"{source}:{repo}/{filename}"
    transfer = a.get(semconv.DOWNLOAD_TRANSFER_S)
    expected = a.get(semconv.DOWNLOAD_EXPECTED_BYTES)
    reasons = a.get(semconv.DOWNLOAD_RETRY_REASONS)
    nbytes = verdicts.positive_int(a, semconv.DOWNLOAD_BYTES)
    return DownloadItem(
        key=key, source=source, repo=repo, filename=filename, path=path if isinstance(path, str) else None,
        host=verdicts.str_value(a, semconv.DOWNLOAD_HOST), cached=a.get(semconv.DOWNLOAD_CACHE_HIT) is True and nbytes == 0,
        bytes=nbytes, cached_bytes=verdicts.positive_int(a, semconv.DOWNLOAD_CACHED_BYTES),
        expected_bytes=expected if isinstance(expected, int) else None, start_ns=span.start_ns, end_ns=span.end_ns,
        transfer_s=float(transfer) if isinstance(transfer, (int, float)) else None,
        resumed=a.get(semconv.DOWNLOAD_RESUMED) is True, retries=verdicts.positive_int(a, semconv.DOWNLOAD_RETRIES),
        retry_reasons=tuple(str(r) for r in reasons) if isinstance(reasons, (list, tuple)) else (),
        interrupted=a.get(semconv.INTERRUPTED) is True,
        transport=verdicts.str_value(a, semconv.DOWNLOAD_TRANSPORT))


def _merge(first: DownloadItem, other: DownloadItem) -> DownloadItem:
    """One file seen twice (fetched, then looked up in the cache): the fetch is the item."""
    fetched = [item for item in (first, other) if not item.cached]
    if not fetched:
        return first
    main = fetched[0]
    if len(fetched) == 2:  # fetched twice (force_download): both transfers' bytes
        return replace(main, bytes=first.bytes + other.bytes, start_ns=min(first.start_ns, other.start_ns),
                       end_ns=max(first.end_ns, other.end_ns))
    return main


def download_spans(spans: Iterable[Span]) -> list[Span]:
    return [s for s in spans if s.name in (semconv.SPAN_DOWNLOAD_FILE, semconv.SPAN_DOWNLOAD_METADATA,
                                           semconv.SPAN_DOWNLOAD_SNAPSHOT)]


def downloads_of(spans: Sequence[Span]) -> Downloads | None:
    """The downloads among a start-up's spans; None when it made none (no span of ours)."""
    mine = download_spans(spans)
    if not mine:
        return None
    items: dict[str, DownloadItem] = {}
    metadata: list[Span] = []
    for span in sorted(mine, key=lambda s: s.start_ns):
        if span.name == semconv.SPAN_DOWNLOAD_METADATA:
            metadata.append(span)
        elif span.name == semconv.SPAN_DOWNLOAD_FILE and span.attributes.get(semconv.DOWNLOAD_NOT_FOUND) is not True:
            item = _item(span)
            items[item.key] = _merge(items[item.key], item) if item.key in items else item
    return Downloads(
        items=tuple(sorted(items.values(), key=lambda i: i.start_ns)), metadata_requests=len(metadata),
        metadata_ns=union_ns((s.start_ns, s.end_ns) for s in metadata),
        wall_ns=union_ns((s.start_ns, s.end_ns) for s in mine),
        start_ns=min(s.start_ns for s in mine), end_ns=max(s.end_ns for s in mine))


_LAST: list = [None, None]  # (weak reference to the breakdown, its downloads): the one asked last


def downloads(breakdown) -> Downloads | None:
    """The downloads of one start-up (its :class:`~.breakdown.Breakdown`). The findings, the
    renderers and the metrics each ask for the same start-up in turn: the last answer is
    kept (a scan of a million-span start-up is tens of milliseconds)."""
    ref, found = _LAST
    if ref is not None and ref() is breakdown:
        return found
    found = downloads_of(breakdown.spans)
    try:
        _LAST[:] = [weakref.ref(breakdown), found]
    except TypeError:  # a record that cannot be weakly referenced: not kept
        pass
    return found


def to_dict(found: Downloads | None, origin_ns: int) -> dict:
    """The ``downloads`` member of ``analyze --format json`` (docs/cli.md)."""
    if found is None:
        return {"files": 0, "bytes": 0, "cached_files": 0, "seconds": 0.0, "metadata_requests": 0,
                "metadata_seconds": 0.0, "throughput_bytes_per_s": None, "items": []}
    return {
        "files": found.files, "bytes": found.bytes, "cached_files": found.cached_files,
        "seconds": json_seconds(found.wall_ns), "metadata_requests": found.metadata_requests,
        "metadata_seconds": json_seconds(found.metadata_ns), "throughput_bytes_per_s": found.throughput,
        "items": [{"source": i.source, "repo": i.repo, "file": i.filename, "path": i.path, "host": i.host,
                   "cached": i.cached, "bytes": i.bytes, "cached_bytes": i.cached_bytes,
                   "expected_bytes": i.expected_bytes, "offset_s": json_seconds(i.start_ns - origin_ns),
                   "duration_s": json_seconds(i.duration_ns), "transfer_s": i.transfer_s,
                   "throughput_bytes_per_s": i.throughput, "resumed": i.resumed, "retries": i.retries,
                   "retry_reasons": list(i.retry_reasons), "transport": i.transport,
                   "interrupted": i.interrupted}
                  for i in found.items],
    }


def shard_notes(breakdown) -> dict:
    """(shard path, start) -> what to add to that shard's line when this start-up's download
    wrote its file; computed once per start-up (a big trace has 300,000 shards)."""
    found = downloads(breakdown)
    if found is None or not found.fetched:
        return {}
    fetched = {item.path: item for item in found.fetched if item.path}
    notes = {}
    for shard in breakdown.shards:
        item = fetched.get(shard.path)
        if item is not None and item.end_ns <= shard.start_ns:
            notes[(shard.path, shard.start_ns)] = (
                f" (written by this start-up's download {format_seconds(shard.start_ns - item.end_ns)} earlier)")
    return notes


def lines(breakdown) -> list[str]:
    """The text report's downloads: a summary line, then one line per file (cached or
    fetched, bytes, time, throughput); the metadata requests' count and time."""
    found = downloads(breakdown)
    if found is None:
        return []
    fetched = found.fetched
    head = (f"downloads: {found.files} file(s), {len(fetched)} fetched ({format_bytes(found.bytes)} "
            f"from the network), {found.cached_files} from the cache, {format_seconds(found.wall_ns)}")
    if found.throughput:
        head += f", {format_rate(found.throughput)}"
    out = [head]
    for item in found.items[:40]:
        if item.cached:
            what = f"cached  {format_bytes(item.cached_bytes or None):>11}{format_seconds(item.duration_ns):>10}"
        else:
            what = (f"fetched {format_bytes(item.bytes):>11}{format_seconds(item.duration_ns):>10}"
                    f"  {format_rate(item.throughput)}")
            if item.resumed:
                what += ", resumed"
            if item.retries:
                what += f", {item.retries} retr{'y' if item.retries == 1 else 'ies'} ({', '.join(item.retry_reasons)})"
            if item.interrupted:
                what += ", cut short"
        label = f"{item.repo}/{item.name}" if item.repo else item.name
        out.append(f"  {label[-48:]:<50}{what}")
    if len(found.items) > 40:
        out.append(f"  ... {len(found.items) - 40} more")
    if found.metadata_requests:
        out.append(f"  metadata requests: {found.metadata_requests}, {format_seconds(found.metadata_ns)}"
                   + (" (every file was cached: HF_HUB_OFFLINE=1 skips them)" if not fetched else ""))
    return out
