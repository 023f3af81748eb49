"""Escaping for renderers: every string that comes from a trace is untrusted.

A span or phase name, a path, a host name or a finding's evidence can hold anything the
traced process (or whoever wrote the file) chose: ``<script>``, Markdown links, table pipes,
or terminal escape sequences that recolour, retitle or clear the reader's terminal. The
text renderer removes control characters; the Markdown renderer also escapes every
character Markdown or inline HTML gives a meaning to.
"""

from __future__ import annotations

import html
import re

# C0 controls (tab and newline become spaces), DEL, C1 controls (a lone 0x9b is a CSI in
# some terminals), and the Unicode bidi overrides that reorder what is displayed.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Inline text never starts a line here (it follows "| " or "- "), so the characters that
# matter only there (#, +, -, 1.) need no escape; with [ and ] escaped no link can form.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_HEX = re.compile(r"^[0-9a-fA-F]+$")


def terminal_text(value: object) -> str:
    """One line with no control characters (ESC sequences are defused, visibly)."""
    return _CONTROL.sub(lambda m: " " if m.group(0) in "\t\n\r" else "\ufffd", str(value))


def html_text(value: object) -> str:
    """Literal text in HTML, an attribute value included."""
    return html.escape(str(value), quote=True)


def markdown_text(value: object) -> str:
    """Literal text inside Markdown (a table cell, a list item): nothing renders as markup
    or HTML."""
    text = terminal_text(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def markdown_code(value: object) -> str:
    """An id shown as code when it is plain hex (as ids are), else as escaped text: a code
    span cannot escape a backtick inside it."""
    text = str(value)
    return f"`{text}`" if _HEX.match(text) else markdown_text(text)


def markdown_fence(text: str) -> str:
    """A code fence that the text inside cannot close: longer than its longest run of
    backticks (a stack frame or span name may hold three)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)
