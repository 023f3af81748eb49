"""``whatif --by`` and ``compare --by`` (issue 39 item 12): the command's own report once per
program (value of the attribute), each written by that command's renderer under a heading
naming the attribute and value; JSON wraps each group's document. Computes nothing."""

from __future__ import annotations

import io
import json
from typing import TextIO

from .escape import html_text, markdown_code, markdown_text, terminal_text
from .report import ByReport


def _group_text(report: ByReport, fmt: str, index: int) -> str:
    from .renderers import RENDERERS  # each group by its command's own renderer

    out = io.StringIO()
    RENDERERS[report.command][fmt](report.groups[index][3], out)
    return out.getvalue()


def render_by_text(report: ByReport, out: TextIO) -> None:
    for index, (key, value, startups, _) in enumerate(report.groups):
        out.write(("\n" if index else "") + f"== {terminal_text(key)} = {terminal_text(value)!r} ({startups}) ==\n")
        out.write(_group_text(report, "text", index))
    for note in report.notes:
        out.write(f"\nnote: {terminal_text(note)}")
    out.write("\n" if report.notes else "")


def render_by_markdown(report: ByReport, out: TextIO) -> None:
    for index, (key, value, startups, _) in enumerate(report.groups):
        out.write(f"# {markdown_text(key)} = {markdown_code(value)} ({startups})\n\n")
        out.write(_group_text(report, "markdown", index) + "\n")
    for note in report.notes:
        out.write(f"> {markdown_text(note)}\n\n")


def render_by_json(report: ByReport, out: TextIO) -> None:
    groups = [{"attribute": key, "value": value, "report": json.loads(_group_text(report, "json", index))}
              for index, (key, value, _, _) in enumerate(report.groups)]
    document = {"schema": f"otel-coldstart.{report.command}-by/1",
                "by": list(dict.fromkeys(key for key, *_ in report.groups)), "groups": groups,
                "notes": list(report.notes)}
    json.dump(document, out, indent=2, allow_nan=False)
    out.write("\n")


def render_by_html(report: ByReport, out: TextIO) -> None:
    """One page: the first group's head, then each group's body under its own heading (the
    group pages' own headings one level down)."""
    from .render_html import page_end

    end = page_end()
    for index, (key, value, startups, _) in enumerate(report.groups):
        page = _group_text(report, "html", index)
        head, body = page.split("<body>\n", 1)
        if not index:
            out.write(head + "<body>\n")
        body = body[:body.rfind("</body>")]
        body = body.removesuffix(end[:end.index("</body>")])  # the page's script: once, at the very end
        out.write(f"<section class=\"by\" data-attribute=\"{html_text(key)}\" data-value=\"{html_text(value)}\">"
                  + ("<h1>" if not index else "<h1 style=\"margin-top:40px;border-top:2px solid #444;padding-top:12px\">")
                  + f"{html_text(key)} = {html_text(value)} <span class=\"muted\">({startups})</span>"
                  "</h1>\n" + body.replace("<h1>", "<h2>").replace("</h1>", "</h2>") + "</section>\n")
    for note in report.notes:
        out.write(f"<p class=\"partial\">{html_text(note)}</p>\n")
    out.write(end)


# by format, as RENDERERS[command]: cli/_inputs.write_report takes these for a ByReport
BY_RENDERERS = {"text": render_by_text, "markdown": render_by_markdown, "json": render_by_json, "html": render_by_html}
