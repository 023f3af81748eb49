"""Every output format of every command, by name: each a renderer ``render(report, out)``
(analyze/report.py). The CLI's ``--format`` choices are these keys."""

from __future__ import annotations

from .render import render_text
from .render_compare import render_compare_html, render_compare_json, render_compare_markdown, render_compare_text
from .render_html import render_html
from .render_json import render_json
from .render_markdown import render_markdown
from .report import Renderer

ANALYZE: dict[str, Renderer] = {"text": render_text, "markdown": render_markdown, "json": render_json,
                                "html": render_html}

COMPARE: dict[str, Renderer] = {"text": render_compare_text, "markdown": render_compare_markdown,
                                "json": render_compare_json, "html": render_compare_html}
