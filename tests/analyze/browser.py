"""Headless Chromium for the report tests: render a page as a person would see it and read
back the DOM after its scripts ran, the console messages and a screenshot's pixels.

Chromium is Debian's (`apt-get install chromium`, done by .ci/run). Without it the tests
skip with the reason, except in CI (CI=true), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium); the browser checks need it")
    return path


def _run(args: list[str], page: str, timeout: float = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args, "file://" + page],
                              capture_output=True, text=True, timeout=timeout)


def dump_dom(page: str, width: int = 1400, height: int = 1000) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and the console lines (errors included)."""
    result = _run([f"--window-size={width},{height}", "--virtual-time-budget=3000", "--dump-dom"], page)
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


def screenshot(page: str, png: str, width: int = 1400, height: int = 2400) -> None:
    result = _run([f"--window-size={width},{height}", f"--screenshot={png}"], page)
    assert os.path.exists(png), result.stderr[-2000:]


def png_pixels(path: str) -> tuple[int, int, list[bytes]]:
    """width, height and rows of RGB(A) bytes of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line) if channels == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        previous = line
    return width, height, rows


def count_colour(rows: list[bytes], rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    count = 0
    r0, g0, b0 = rgb
    for row in rows:
        for i in range(0, len(row), 3):
            if abs(row[i] - r0) <= tolerance and abs(row[i + 1] - g0) <= tolerance and abs(row[i + 2] - b0) <= tolerance:
                count += 1
    return count


# Injected into a copy of a page under test: every text in an SVG must lie inside its SVG's
# view box, and no SVG may be wider than its box without a scroll container. The result is
# written into the DOM, where --dump-dom reads it.
CLIP_CHECK = """<script>
(function(){
  var clipped = [];
  document.querySelectorAll('svg').forEach(function(svg){
    var vb = svg.viewBox.baseVal, w = vb && vb.width ? vb.width : svg.width.baseVal.value,
        h = vb && vb.height ? vb.height : svg.height.baseVal.value;
    svg.querySelectorAll('text').forEach(function(t){
      var b = t.getBBox();
      if (b.width > 0 && (b.x < -0.5 || b.y < -0.5 || b.x + b.width > w + 0.5 || b.y + b.height > h + 0.5))
        clipped.push(t.textContent);
    });
  });
  var out = document.createElement('pre'); out.id = 'clip-check';
  out.textContent = JSON.stringify(clipped); document.body.appendChild(out);
})();
</script>"""


def with_clip_check(html_text: str) -> str:
    return html_text.replace("</body>", CLIP_CHECK + "</body>") if "</body>" in html_text else \
        "<!DOCTYPE html><html><body>" + html_text + CLIP_CHECK + "</body></html>"
