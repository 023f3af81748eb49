"""Every output format of every command, by name: ``RENDERERS[command][format]`` is a renderer
``render(report, out)`` over that command's report (analyze/report.py). Every command has the
same formats, the CLI's ``--format`` choices; a new format is one function per command here."""

from __future__ import annotations

from .render import render_text
from .render_capacity import render_capacity_html, render_capacity_json, render_capacity_markdown, render_capacity_text
from .render_compare import render_compare_html, render_compare_json, render_compare_markdown, render_compare_text
from .render_html import render_html
from .render_json import render_json
from .render_markdown import render_markdown
from .render_whatif import render_whatif_html, render_whatif_json, render_whatif_markdown, render_whatif_text
from .report import Renderer

FORMATS = ("text", "markdown", "json", "html")

RENDERERS: dict[str, dict[str, Renderer]] = {
    "analyze": {"text": render_text, "markdown": render_markdown, "json": render_json, "html": render_html},
    "compare": {"text": render_compare_text, "markdown": render_compare_markdown, "json": render_compare_json,
                "html": render_compare_html},
    "capacity": {"text": render_capacity_text, "markdown": render_capacity_markdown, "json": render_capacity_json,
                 "html": render_capacity_html},
    "whatif": {"text": render_whatif_text, "markdown": render_whatif_markdown, "json": render_whatif_json,
               "html": render_whatif_html},
}
