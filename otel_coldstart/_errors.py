"""The one place internal errors go.

Hooks run inside the host's model loading; a bug of ours must never become the host's
exception. Internal errors are logged once per site with the traceback ("your code still
runs, with less telemetry") and kept in ``INTERNAL_ERRORS`` so the test suite can fail
loudly on any of them (see tests/conftest.py).
"""

from __future__ import annotations

import logging
import sys
import traceback

logger = logging.getLogger("otel_coldstart")

INTERNAL_ERRORS: list[str] = []  # "where: ExcType: message" of every internal error seen
_MAX_KEPT = 100
_logged_sites: set[str] = set()


def report_internal_error(where: str) -> None:
    """Call from an ``except Exception`` block inside our own code."""
    try:
        exc = sys.exc_info()[1]
        summary = f"{where}: {type(exc).__name__}: {exc}"
        if len(INTERNAL_ERRORS) < _MAX_KEPT:
            INTERNAL_ERRORS.append(summary)
        if where not in _logged_sites:
            _logged_sites.add(where)
            logger.warning(
                "otel-coldstart internal error in %s; your code still runs, with less "
                "telemetry.\n%s",
                where,
                traceback.format_exc(),
            )
    except Exception:  # pragma: no cover - logging itself failed; stay silent
        pass
