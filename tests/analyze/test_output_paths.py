"""Issue 25.6: ``compare --format html`` (the same self-contained page style as analyze and
capacity), and clear messages for special output paths: ``--waterfall /dev/null``, ``-o`` a
directory, a missing directory, a FIFO nobody reads; ``-o /dev/null`` and ``-o /dev/stdout``
simply work. One line on stderr and a distinct exit code, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from analyze_records import data_file
from browser import count_colour, dump_dom, png_pixels, screenshot, with_clip_check
from otel_coldstart.cli import main

COLD = data_file("demo-cold-first-shard.otlp.jsonl")
WARM = data_file("demo-warm.otlp.jsonl")


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_waterfall_into_a_path_that_is_not_a_directory(capsys, tmp_path):
    (tmp_path / "a-file").write_text("x")
    for target in ("/dev/null", str(tmp_path / "a-file")):
        code, out, err = _run(capsys, "analyze", COLD, "--waterfall", target)
        assert code == 2 and out == ""  # refused before anything is read or written
        assert err.strip() == (f"otel-coldstart: error: --waterfall {target}: not a directory (the waterfalls are "
                               "written into one, an SVG file per start-up)")


@pytest.mark.process  # starts a process of its own (the CLI, or headless Chromium)
def test_output_to_devices_and_to_stdout_works(capsys, tmp_path):
    code, out, err = _run(capsys, "analyze", COLD, "-o", "/dev/null")
    assert code == 0 and out == "" and err == ""
    redirected = tmp_path / "report.txt"
    with open(redirected, "w") as handle:
        done = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", COLD, "-o", "/dev/stdout"],
                              stdout=handle, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert redirected.read_text().startswith("model.startup ")


@pytest.mark.parametrize("case", ["directory", "missing directory", "under a file"])
def test_output_paths_that_cannot_be_written(capsys, tmp_path, case):
    (tmp_path / "a-file").write_text("x")
    target, needle = {"directory": (str(tmp_path), "is a directory; give a file name"),
                      "missing directory": (str(tmp_path / "nope" / "r.html"), f"the directory {tmp_path / 'nope'} "
                                                                                   "does not exist"),
                      "under a file": (str(tmp_path / "a-file" / "r.html"), "a part of the path is a file")}[case]
    for command in (["analyze", COLD], ["compare", WARM, COLD], ["capacity", COLD]):
        code, _, err = _run(capsys, *command, "-o", target)
        assert code == 10, (command, err)
        assert len(err.strip().splitlines()) <= 3 and f"--output {target}" in err and needle in err


def test_output_to_a_fifo_nobody_reads_fails_at_once_and_one_that_is_read_works(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    code, _, err = _run(capsys, "analyze", COLD, "-o", str(fifo))
    assert code == 10 and "a FIFO that no process is reading" in err
    assert time.monotonic() - started < 30  # not blocked in open()
    received = []

    def reader():
        with open(fifo) as handle:
            received.append(handle.read())

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.2)
    for _ in range(50):  # the reader's open() may not have happened yet
        code, _, err = _run(capsys, "analyze", COLD, "-o", str(fifo))
        if code != 10:
            break
        time.sleep(0.1)
    thread.join(30)
    assert code == 0 and received and received[0].startswith("model.startup ")


@pytest.mark.process  # starts a process of its own (the CLI, or headless Chromium)
def test_compare_html_is_a_self_contained_page_that_renders(capsys, tmp_path):
    page = tmp_path / "compare.html"
    code, _, _ = _run(capsys, "compare", WARM, COLD, "--format", "html", "-o", str(page))
    assert code == 0
    text = page.read_text()
    assert "default-src 'none'" in text and "<link" not in text and not re.search(r"(src|href)=", text)
    assert f"<code>{WARM}</code>" in text and f"<code>{COLD}</code>" in text
    rows = re.findall(r'<tr data-verdict="([^"]+)"><td>([^<]+)</td>', text)
    assert rows[0] == ("within noise", "total") and ("within noise", "deserialize") in rows
    assert "no phase got slower in B beyond noise" in text and "the sides differ in cache state" in text
    document = json.loads(_run(capsys, "compare", WARM, COLD, "--format", "json")[1])
    assert [phase for _, phase in rows] == [r["phase"] for r in document["rows"]]  # the same table as JSON

    checked = tmp_path / "checked.html"
    checked.write_text(with_clip_check(text))
    dom, console = dump_dom(str(checked))
    assert 'data-rendered="1"' in dom
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    png = tmp_path / "compare.png"
    screenshot(str(page), str(png), height=900)
    _, _, pixels = png_pixels(str(png))
    assert count_colour(pixels, (0x1f, 0x77, 0xb4)) >= 30  # deserialize's bars are drawn in its colour
    keep = os.environ.get("OTEL_COLDSTART_KEEP_SCREENSHOTS")
    if keep:  # for a person to look at
        import shutil
        shutil.copy(png, keep)
