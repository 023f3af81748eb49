"""The one place internal errors go.

Hooks run inside the host's model loading; a bug of ours must never become the host's
exception. Internal errors are logged once per site with the traceback ("your code still
runs, with less telemetry") and kept in ``INTERNAL_ERRORS`` so the test suite can fail
loudly on any of them (see tests/conftest.py).

Two spellings of the same rule: ``with internal_errors("site"):`` around a block of our own
code (the usual one), and :func:`report_internal_error` inside an ``except Exception`` block
where the code must go on differently after a failure (return a default, fall back, clean
up), or in a wrapper run on every call of the host (a tensor's ``.to()``, a read, an
import): there a ``try`` costs nothing until it fails, and the guard is an object per call.

An ``except Exception`` that reports nothing says why on its line: the host's own objects
probed (its failure is its own, and its call raises it), a device call the host's error may
surface in, the exit or a signal handler (nobody left to tell).
"""

from __future__ import annotations

import logging
import sys
import traceback

logger = logging.getLogger("otel_coldstart")

INTERNAL_ERRORS: list[str] = []  # "where: ExcType: message" of every internal error seen
_MAX_KEPT = 100
_logged_sites: set[str] = set()


def report_internal_error(where: str, error: BaseException | None = None) -> None:
    """Call from an ``except Exception`` block inside our own code (or pass the error)."""
    try:
        exc = error if error is not None else sys.exc_info()[1]
        summary = f"{where}: {type(exc).__name__}: {exc}"
        if len(INTERNAL_ERRORS) < _MAX_KEPT:
            INTERNAL_ERRORS.append(summary)
        if where not in _logged_sites:
            _logged_sites.add(where)
            text = "".join(traceback.format_exception(exc)) if exc is not None else ""
            logger.warning(
                "otel-coldstart internal error in %s; your code still runs, with less "
                "telemetry.\n%s",
                where,
                text,
            )
    except Exception:  # pragma: no cover - logging itself failed; stay silent
        pass


class internal_errors:
    """``with internal_errors("site"):`` runs the block and swallows any ``Exception`` it
    raises into :func:`report_internal_error` (never ``BaseException``: a KeyboardInterrupt or
    SystemExit raised inside our code is the host's). A plain class, not a generator-based
    context manager: it is entered on the host's thread at span boundaries."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> internal_errors:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and isinstance(exc, Exception):
            report_internal_error(self.where, exc)
            return True
        return False
