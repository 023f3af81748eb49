"""The analyzer's downloads (analyze/downloads.py) and the delivery findings on hand-built
records: per-file items (a file fetched then looked up in the cache is one item), network
bytes never cache bytes, metadata requests counted apart, the JSON member, the text lines."""

from __future__ import annotations

import io
import json

from analyze_records import MS, child, only, root, shard
from otel_coldstart import semconv
from otel_coldstart.analyze.downloads import downloads, lines, shard_notes, to_dict
from otel_coldstart.analyze.findings import download_in_startup, find, hub_metadata_cached, serial_download
from otel_coldstart.analyze.render import render_startup_text
from otel_coldstart.analyze.whatif import project

MiB = 1 << 20
HUB = "hub.example:8080"


def file_span(parent, name, start_ms, end_ms, nbytes, cached=False, thread=1, **extra):
    attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF, semconv.DOWNLOAD_REPO: "org/m",
             semconv.DOWNLOAD_FILENAME: name, semconv.DOWNLOAD_PATH: f"/ckpt/{name}", semconv.DOWNLOAD_HOST: HUB,
             semconv.DOWNLOAD_CACHE_HIT: cached, semconv.DOWNLOAD_BYTES: 0 if cached else nbytes,
             semconv.DOWNLOAD_CACHED_BYTES: nbytes if cached else 0, **extra}
    if not cached:
        attrs[semconv.DOWNLOAD_TRANSFER_S] = (end_ms - start_ms) / 1000
    return child(parent, semconv.SPAN_DOWNLOAD_FILE, semconv.PHASE_DOWNLOAD, start_ms, end_ms, thread=thread, **attrs)


def metadata(parent, start_ms, end_ms, method="HEAD"):
    return child(parent, semconv.SPAN_DOWNLOAD_METADATA, semconv.PHASE_DOWNLOAD, start_ms, end_ms, **{
        semconv.DOWNLOAD_METHOD: method, semconv.DOWNLOAD_STATUS: 200, semconv.DOWNLOAD_HOST: HUB})


def downloading_startup():
    """4 shards fetched in parallel (1 s each, 100 MiB), then looked up in the cache, then read."""
    r = root(3000)
    spans = [r, metadata(r, 0, 50, "GET")]
    for i in range(4):
        name = f"model-{i + 1:05d}.safetensors"
        spans.append(metadata(r, 50, 100))
        spans.append(file_span(r, name, 50, 1050, 100 * MiB, thread=10 + i))
        spans.append(file_span(r, name, 1100, 1101, 100 * MiB, cached=True))
        spans.append(shard(r, i, 1200 + 100 * i, 1300 + 100 * i, 100 * MiB, "warm", 0))
    spans.append(file_span(r, "adapter_config.json", 1000, 1010, 0, **{semconv.DOWNLOAD_NOT_FOUND: True}))
    return spans


def test_items_bytes_and_metadata():
    found = downloads(only(downloading_startup()))
    assert found.files == 4 and found.cached_files == 0  # fetched then looked up: one item, fetched
    assert found.bytes == 400 * MiB
    assert found.metadata_requests == 5 and found.metadata_ns == 100 * MS
    assert found.wall_ns == 1051 * MS  # 0-1050 ms fetching, 1100-1101 ms the cache look-ups
    assert abs(found.throughput - 400 * MiB / 1.0) < 1
    doc = to_dict(found, downloading_startup()[0].start_ns)
    assert doc["files"] == 4 and doc["bytes"] == 400 * MiB and doc["metadata_requests"] == 5
    assert [i["file"] for i in doc["items"]] == [f"model-{i:05d}.safetensors" for i in (1, 2, 3, 4)]
    json.dumps(doc)


def test_odd_attribute_types_on_a_download_are_left_out_not_a_crash():
    # A trace is input: a number where a download's strings or list belong (mypy found the
    # retry reasons iterated whatever they were).
    spans = downloading_startup()
    spans.append(file_span(spans[0], "odd.bin", 50, 60, 10, **{
        semconv.DOWNLOAD_RETRY_REASONS: 5, semconv.DOWNLOAD_HOST: 7, semconv.DOWNLOAD_TRANSPORT: 1.5,
        semconv.DOWNLOAD_REPO: ("a",), semconv.DOWNLOAD_RETRIES: 1}))
    b = only(spans)
    [odd] = [i for i in downloads(b).items if i.bytes == 10]
    assert odd.retry_reasons == () and odd.host is None and odd.transport is None and odd.repo is None
    out = io.StringIO()
    render_startup_text(b, out)
    assert "downloads: 5 file(s)" in out.getvalue()
    json.dumps(to_dict(downloads(b), spans[0].start_ns))


def test_cached_start_has_no_network_bytes_and_says_offline():
    r = root(1000)
    spans = [r, metadata(r, 0, 300, "GET")] + [file_span(r, f"s{i}", 300, 301, 10 * MiB, cached=True)
                                              for i in range(3)]
    b = only(spans)
    found = downloads(b)
    assert found.bytes == 0 and found.files == found.cached_files == 3 and found.metadata_requests == 1
    [f] = hub_metadata_cached.check(b)
    assert f.saving_ns == 300 * MS and "HF_HUB_OFFLINE=1" in f.lever and "30% of the start-up" in f.title
    assert download_in_startup.check(b) == [] and serial_download.check(b) == []
    assert any("HF_HUB_OFFLINE=1" in line for line in lines(b))


def test_download_in_startup_and_shards_written_by_it():
    b = only(downloading_startup())
    [f] = download_in_startup.check(b)
    # The predownload lever's projection (issue 41: one figure for both), not the 1 s the four
    # files were fetched side by side: each file's time over the threads busy beside it, the
    # other three and the main thread's 60 ms of HEADs and look-ups (4.06).
    assert f.saving_ns == project([b], ["predownload"]).levers[0].saving_p50_ns
    assert f.saving_ns == 4 * int(1000 * MS / 4.06)
    assert "pre-stage" in f.lever and "predownload" in f.lever and "predownload lever's projection" in f.estimate
    assert "400.0 MiB" in f.title
    assert hub_metadata_cached.check(b) == []
    assert serial_download.check(b) == []  # they overlapped
    shard = b.shards[0]
    note = shard_notes(b)[(shard.path, shard.start_ns)]
    assert "written by this start-up's download" in note
    out = io.StringIO()
    render_startup_text(b, out)
    text = out.getvalue()
    assert "downloads: 4 file(s), 4 fetched (400.0 MiB from the network), 0 from the cache" in text
    assert "written by this start-up's download" in text
    assert any(x.rule == "download_in_startup" for x in find([b]))


def test_serial_and_slow_downloads():
    r = root(10_000)
    spans = [r]
    t = 0
    for i, ms in enumerate((1000, 1000, 1000, 4000)):  # one after another; the last 4x slower
        spans.append(file_span(r, f"s{i}", t, t + ms, 100 * MiB))
        t += ms
    b = only(spans)
    rules = {f.rule: f for f in serial_download.check(b)}
    assert rules["serial_download"].saving_ns == 3000 * MS  # 7 s fetching, the longest alone 4 s
    assert "max_workers" in rules["serial_download"].lever
    slow = rules["slow_download"]
    assert "s3" in slow.title and "4.0x slower" in slow.title and slow.saving_ns == 3000 * MS


def test_markdown_and_html_show_the_downloads_and_escape_them():
    spans = downloading_startup()
    r = spans[0]
    spans.append(file_span(r, "<script>x</script>|y", 1200, 1201, 5, cached=True))
    b = only(spans)
    from otel_coldstart.analyze.render_downloads import render_downloads_html, render_downloads_markdown

    md = io.StringIO()
    render_downloads_markdown(b, md)
    assert "| org/m/model-00001.safetensors | fetched | 100.0 MiB |" in md.getvalue()
    assert "<script>" not in md.getvalue() and "5 file(s), 4 fetched" in md.getvalue()
    parts = []
    render_downloads_html(b, parts.append)
    page = "".join(parts)
    assert "<h3>Downloads</h3>" in page and "<script>x" not in page and "&lt;script&gt;" in page
    assert page.count("<tr>") == 6  # header + 5 files


def test_whatif_predownload_and_offline():
    from otel_coldstart.analyze.whatif import project

    downloading = only(downloading_startup())  # 3 s; 1.05 s of it downloading (files in parallel)
    result = project([downloading], ["predownload", "offline", "all"])
    by = {p.lever: p for p in result.levers}
    # The 4 files ran in parallel on 4 threads beside nothing else: 1 s of wall time off; the
    # HEADs (under no file here) and the repo-info GET stay under predownload.
    assert abs(by["predownload"].saving_p50_ns - 1000 * MS) <= 20 * MS  # less a little: HEADs ran beside them
    # The GET alone (50 ms), the 4 HEADs beside the 4 files (4 x 50 ms over 5 busy threads).
    assert abs(by["offline"].saving_p50_ns - 90 * MS) <= 2 * MS
    assert any("offline mode needs them on the node" in s for s in by["offline"].assumptions)
    cached = [root(1000)]
    cached += [file_span(cached[0], "s", 300, 301, MiB, cached=True)]
    assert project([only(cached)], ["predownload"]).levers[0].saving_p50_ns == 0
