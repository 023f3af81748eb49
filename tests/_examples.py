"""How many examples a property test runs: its count as written (CI's, `make test`) under the
default hypothesis profile, a fifth of it under the "quick" one that `make test-fast` selects
(tests/conftest.py registers it). Explicit counts in ``@settings`` override a profile, so the
tests that set one take it through here."""

from __future__ import annotations

from hypothesis import settings

DEFAULT_MAX_EXAMPLES = 100  # hypothesis's own default: a profile's max_examples over this is its scale


def examples(full: int) -> int:
    return max(10, full * settings.default.max_examples // DEFAULT_MAX_EXAMPLES)
