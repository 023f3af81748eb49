"""The what-if and warm-pool reports as a person sees them: rendered in headless Chromium
(the same helpers as the analyze report), self-contained, with the levers' bars drawn."""

from __future__ import annotations

import json
import re

import pytest

from analyze_records import data_file
from browser import count_colour, dump_dom, png_pixels, screenshot, with_clip_check
from otel_coldstart.cli import main

pytestmark = pytest.mark.process  # headless Chromium is a process of its own: not in `make test-fast`

COLD = data_file("demo-cold-first-shard.otlp.jsonl")
WARM = data_file("demo-warm.otlp.jsonl")
LEVER_BLUE = (0x2B, 0x6A, 0x9E)


@pytest.fixture
def page(tmp_path, capsys):
    path = tmp_path / "whatif.html"
    assert main(["whatif", COLD, WARM, "--format", "html", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def test_whatif_page_is_self_contained_and_renders_every_lever(page, tmp_path, capsys):
    text = page.read_text()
    assert "default-src 'none'" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text) and "<link" not in text
    checked = tmp_path / "checked.html"
    checked.write_text(with_clip_check(text))
    dom, console = dump_dom(str(checked))
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    assert main(["whatif", COLD, WARM, "--format", "json"]) == 0
    levers = [lever["lever"] for lever in json.loads(capsys.readouterr().out)["levers"]]
    assert levers and all(f'data-lever="{name}"' in dom for name in ["baseline", *levers])
    assert "Assumptions:" in dom and "Baseline per phase" in dom


def test_whatif_page_screenshot_draws_the_projected_bars(page, tmp_path):
    png = tmp_path / "shot.png"
    screenshot(str(page), str(png), height=1600)
    width, height, rows = png_pixels(str(png))
    assert (width, height) == (1400, 1600)
    assert count_colour(rows, LEVER_BLUE) >= 200  # the levers' p50 bars


def test_capacity_page_shows_the_warm_pool_per_group(tmp_path, capsys):
    path = tmp_path / "capacity.html"
    assert main(["capacity", COLD, WARM, "--ramp", "12", "--provisioning", "90s", "--format", "html",
                 "-o", str(path)]) == 0
    capsys.readouterr()
    dom, console = dump_dom(str(path))
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    pools = re.findall(r'<p class="warm-pool" data-replicas="(\d+)">', dom)
    assert pools and all(int(p) >= 19 for p in pools)  # 12/min x (90 s + p95) / 60 s, rounded up
    assert "replicas/min x (90.00 s provisioning +" in dom
