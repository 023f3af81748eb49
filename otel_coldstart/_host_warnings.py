"""The host's warnings keep the host's line.

A warning raised inside a wrapped call (``torch.load`` of a TorchScript archive, a complex
to real ``.to()``, ``pin_memory(device)``) is attributed by Python to the frame its
``stacklevel`` lands on, and with our wrappers in between, that frame is ours
(``patches/_files.py``, ``tensor_ops.py``): a host that turned its own module's warnings
into errors (``filterwarnings("error", module="__main__")``) no longer got the error, and
under the default filter, warnings from two call sites of the host collapsed into one (the
once-per-location registry was ours).

Nothing is done per call (the wrappers run on the hottest paths torch has, and
``warnings.catch_warnings`` mutates process-global state, is not thread-safe, and costs
microseconds). Instead, while instrumented:

- an ``always`` filter for our modules stands in front of the filters, so that a warning
  attributed to one of our frames is never swallowed by our own registry and reaches
  ``warnings.showwarning``;
- our hook finds the frame the warning was attributed to on the current stack, skips our
  frames as the plain call would not have had them (a ``stacklevel`` that landed on the
  j-th of our frames lands, without them, on the j-th frame past them), and re-dispatches
  with ``warnings.warn_explicit`` at that frame, with its module name and
  ``__warningregistry__``: the host's filters and once-per-location registry apply exactly
  as they would have. Any other warning goes on as it came.

The hook is ``warnings._showwarnmsg``, the one function every shown warning passes through
(the C ``warn()`` looks it up on the module each time) before it reaches ``showwarning`` or,
inside ``catch_warnings(record=True)`` (``pytest``'s warnings summary, ``pytest.warns``,
``recwarn``), the record list: so those, and a ``showwarning`` installed after
``instrument()`` (``logging.captureWarnings(True)``), get the host's line too (issue 39).
Where ``_showwarnmsg`` is missing (another Python) the hook is ``showwarning``, with those
limits (docs/decisions.md).

``uninstrument()`` removes both if they are still ours. After ``warnings.resetwarnings()``
our filter is gone and our module's own registry shows a given warning once for all of the
host's call sites.
"""

from __future__ import annotations

import os
import sys
import warnings

_OUR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MODULE_PATTERN = r"otel_coldstart(\.|$)"

_previous_showwarning = None
_previous_showwarnmsg = None
_our_filter: tuple | None = None


def _is_ours(filename: str | None) -> bool:
    return isinstance(filename, str) and filename.startswith(_OUR_DIR)


def install() -> None:
    """Put the filter and the hook in place (idempotent)."""
    global _previous_showwarning, _previous_showwarnmsg, _our_filter
    current = getattr(warnings, "_showwarnmsg", None)
    if callable(current):
        if current is not _showwarnmsg:
            _previous_showwarnmsg = current
            warnings._showwarnmsg = _showwarnmsg  # type: ignore[attr-defined]  # CPython's private hook
    elif warnings.showwarning is not _showwarning:
        _previous_showwarning = warnings.showwarning
        warnings.showwarning = _showwarning
    if _our_filter is None or _our_filter not in warnings.filters:
        warnings.filterwarnings("always", module=_MODULE_PATTERN)
        _our_filter = warnings.filters[0]


def uninstall() -> None:
    """Take both away if they are still ours (a hook installed over ours stays the host's)."""
    global _previous_showwarning, _previous_showwarnmsg, _our_filter
    if warnings.showwarning is _showwarning and _previous_showwarning is not None:
        warnings.showwarning = _previous_showwarning
    _previous_showwarning = None
    if getattr(warnings, "_showwarnmsg", None) is _showwarnmsg and _previous_showwarnmsg is not None:
        warnings._showwarnmsg = _previous_showwarnmsg  # type: ignore[attr-defined]  # CPython's private hook
    _previous_showwarnmsg = None
    if _our_filter is not None:
        try:
            warnings.filters.remove(_our_filter)  # type: ignore[attr-defined]  # a list at runtime (typeshed: Sequence)
            mutated = getattr(warnings, "_filters_mutated", None)
            if mutated is not None:
                mutated()
        except ValueError:  # resetwarnings() took it already
            pass
        _our_filter = None


def host_frame(filename: str, lineno: int, frame):
    """The frame a warning attributed to ``filename:lineno`` (one of ours) would have been
    attributed to without our frames, searching outward from ``frame``; None if not found."""
    run = 0
    while frame is not None:
        code_file = frame.f_code.co_filename
        ours = _is_ours(code_file)
        run = run + 1 if ours else 0
        if ours and code_file == filename and frame.f_lineno == lineno:
            break
        frame = frame.f_back
    if frame is None:
        return None
    landed_on = run  # the stacklevel landed on the run-th of our frames from the inside
    frame = frame.f_back
    while frame is not None and _is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    for _ in range(landed_on - 1):
        if frame is None:
            return None
        frame = frame.f_back
    return frame


def _redispatched(message, category, filename, lineno, source=None) -> bool:
    """Warn again at the host's frame if ``filename:lineno`` is one of ours; False if not."""
    if not _is_ours(filename):
        return False
    try:
        target = host_frame(filename, lineno, sys._getframe(2))
    except Exception:  # never let our bookkeeping change what the host sees
        target = None
    if target is None:
        return False
    host_globals = target.f_globals
    registry = host_globals.setdefault("__warningregistry__", {})
    # The host's filters decide now, as they would have at this frame: "error" raises from
    # here, through the library's warn() call, as it would have without us. No
    # module_globals: warn() itself passes none (they only serve to find the source line,
    # and a -c or frozen __main__'s loader raises ImportError when asked).
    warnings.warn_explicit(message, category, target.f_code.co_filename, target.f_lineno,
                           module=host_globals.get("__name__", "<string>"), registry=registry, source=source)
    return True


def _showwarnmsg(msg) -> None:
    if not _redispatched(msg.message, msg.category, msg.filename, msg.lineno, getattr(msg, "source", None)):
        (_previous_showwarnmsg or warnings._showwarnmsg_impl)(msg)  # type: ignore[attr-defined]  # CPython's private hook


def _showwarning(message, category, filename, lineno, file=None, line=None):
    if not _redispatched(message, category, filename, lineno):
        (_previous_showwarning or warnings._showwarning_orig)(message, category, filename, lineno, file, line)
