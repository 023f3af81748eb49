"""docs/conventions.md names every span, attribute and metric that semconv.py defines."""

from __future__ import annotations

import os
import re

from otel_coldstart import semconv

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "conventions.md")
NAME = re.compile(r"^(coldstart\.|model\.|thread\.)[a-z0-9_.]+$")


def _names() -> set[str]:
    return {v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str) and NAME.match(v)}


def test_every_semconv_name_is_documented():
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    missing = sorted(n for n in _names() if f"`{n}`" not in text and f"`{n} " not in text and f"`{n}/" not in text)
    assert not missing, f"add to docs/conventions.md: {missing}"


def test_every_builtin_phase_is_documented():
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    assert not [p for p in semconv.BUILTIN_PHASES if f"`{p}`" not in text]
