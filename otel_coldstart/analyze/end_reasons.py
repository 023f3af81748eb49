"""How a start-up ended, in words: the one rule every command uses (analyze's header in text,
markdown and HTML, whatif's "left out" lines, compare's and capacity's "not ready" counts).

Each command used to word it itself, and they disagreed: whatif said a SIGKILLed start-up
"exited" where analyze and capacity said killed. :func:`end_word` is the short form (the
``coldstart.end_reason`` value, counted by compare and capacity), :func:`end_sentence` the
header line; both read the same root attribute, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any

from .. import semconv
from .units import format_seconds

NOT_MARKED = "not marked ready"  # a root with neither ready nor an end reason (an older or foreign writer)

# What cut a start-up short, by coldstart.end_reason; the killed one is worded by _killed below.
_CUT_SHORT = {
    semconv.END_SIGTERM: "SIGTERM before ready()",
    semconv.END_EXIT: "process exited before ready()",
    semconv.END_UNINSTRUMENTED: "uninstrument() before ready()",
    semconv.END_UNTIMED: "the root's own times cannot be true; timed from its spans",
}


def end_word(b: Any) -> str:
    """How a start-up ended, in one word: ``ready``, or its ``coldstart.end_reason``
    (killed, sigterm, exception, exit, ...), or "not marked ready" when the root says neither."""
    if b.ready:
        return semconv.END_READY
    reason = b.root.attributes.get(semconv.END_REASON)
    return reason if isinstance(reason, str) and reason and reason != semconv.END_READY else NOT_MARKED


def end_sentence(b: Any) -> str:
    """One line on how the start-up ended: "ready", "KILLED: ..." for a start-up that wrote no
    end (SIGKILL, the OOM killer; rebuilt from its progress records), else "NOT READY: " and
    what cut it short, with the phase that was running."""
    word = end_word(b)
    if word == semconv.END_READY:
        return "ready"
    if word == semconv.END_KILLED:
        return f"KILLED: no end, last sign of life at +{format_seconds(b.duration_ns)}"
    if word == semconv.END_EXCEPTION:
        kind = b.root.attributes.get(semconv.END_EXCEPTION_TYPE)
        what = f"uncaught {kind if isinstance(kind, str) else 'exception'} before ready()"
    else:
        what = _CUT_SHORT.get(word, "process exited before ready()" if word == NOT_MARKED else
                              f"ended ({word}) before ready()")
    phase = b.root.attributes.get(semconv.END_PHASE)
    return f"NOT READY: {what}" + (f", during phase {phase!r}" if isinstance(phase, str) and phase else "")
