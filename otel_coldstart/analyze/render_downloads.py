"""The downloads of a start-up in the Markdown and HTML reports: a table like the shards'
(per file: cached or fetched, bytes, time, throughput), with the metadata requests below.
Made from analyze/downloads.py; nothing computed here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from .downloads import downloads
from .escape import html_text, markdown_text
from .units import format_bytes, format_rate, format_seconds

_LIMIT = 40  # rows shown; the count of the rest follows


def _rows(b):
    found = downloads(b)
    if found is None:
        return None, []
    rows = []
    for item in found.items[:_LIMIT]:
        label = f"{item.repo}/{item.name}" if item.repo else item.name
        if item.cached:
            rows.append((label, "cached", format_bytes(item.cached_bytes or None), format_seconds(item.duration_ns), "-"))
            continue
        notes = [n for n in ("resumed" if item.resumed else "",
                             f"{item.retries} retries ({', '.join(item.retry_reasons)})" if item.retries else "",
                             "cut short" if item.interrupted else "") if n]
        rows.append((label, "fetched" + (f" ({'; '.join(notes)})" if notes else ""), format_bytes(item.bytes),
                     format_seconds(item.duration_ns), format_rate(item.throughput)))
    return found, rows


def _summary(found) -> str:
    text = (f"Downloads: {found.files} file(s), {len(found.fetched)} fetched, {format_bytes(found.bytes).strip()} "
            f"from the network, {found.cached_files} from the cache; {found.metadata_requests} metadata "
            f"request(s), {format_seconds(found.metadata_ns).strip()}")
    if found.items and not found.fetched and found.metadata_requests:
        text += " (every file was cached: HF_HUB_OFFLINE=1 skips them)"
    return text


def render_downloads_markdown(b, out: TextIO) -> None:
    found, rows = _rows(b)
    if found is None:
        return
    out.write(markdown_text(_summary(found)) + ".\n\n")
    if rows:
        out.write("| file | | bytes | time | throughput |\n|---|---|---:|---:|---:|\n")
        for row in rows:
            out.write("| " + " | ".join(markdown_text(cell.strip()) for cell in row) + " |\n")
        if found.files > _LIMIT:
            out.write(f"| ... {found.files - _LIMIT} more | | | | |\n")
        out.write("\n")


def render_downloads_html(b, w: Callable[[str], None]) -> None:
    found, rows = _rows(b)
    if found is None:
        return
    e = html_text  # everything may come from a trace
    w(f"<h3>Downloads</h3>\n<p>{e(_summary(found))}</p>\n")
    if rows:
        w("<table class=\"data downloads\"><thead><tr><th>file</th><th></th><th class=\"num\">bytes</th>"
          "<th class=\"num\">time</th><th class=\"num\">throughput</th></tr></thead><tbody>\n")
        for label, what, nbytes, time, rate in rows:
            w(f"<tr><td>{e(label)}</td><td>{e(what)}</td><td class=\"num\">{e(nbytes.strip())}</td>"
              f"<td class=\"num\">{e(time.strip())}</td><td class=\"num\">{e(rate.strip())}</td></tr>\n")
        w("</tbody></table>\n")
