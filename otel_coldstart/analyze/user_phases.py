"""User phases named like the plugin's own, kept apart (issue 39 item 6).

``phase()`` now refuses the names of the phases the plugin records (semconv.RESERVED_PHASE_NAMES),
but traces written before it did may hold ``phase("unattributed")`` or ``phase("import")``
spans. Read as they are, a user "unattributed" phase printed a second "unattributed" row, and
a ``time.sleep`` in ``phase("import")`` was summed with the real imports, given the import
advice, and "next: import" could point at itself. Such a span is renamed
``<name> (user phase)``: its own row, the generic advice of a user phase.

A span is taken for a user phase when it is exactly what ``phase()`` writes: named
``coldstart.<phase>``, with its thread's name, and no attribute of ours beyond the phase itself
and after_ready (every span the plugin records in those phases carries its facts: files,
bytes, modules, counts, the graph API), and, for ``import``, not starting with its start-up
(the import span from process start to ``instrument()`` may carry nothing else in older
traces). ``unattributed`` is never a phase of ours, so any span of that phase is a user's.
transformers' steps are left as they are: one of ours may carry nothing but its phase. A
span that fits none of these is counted as ours, as before: when in doubt, nothing is renamed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .. import semconv
from .model import Span

USER_SUFFIX = " (user phase)"
_RESERVED = frozenset(semconv.RESERVED_PHASE_NAMES) - frozenset(semconv.TRANSFORMERS_PHASES)
_PHASE_KEYS = frozenset({semconv.PHASE, semconv.AFTER_READY})
_OURS = "coldstart."
# phase, thread id and name, after_ready, and what a failure adds (error.type, status): a
# span with more keys than this is not one phase() wrote.
_MOST_USER_KEYS = 8


def _is_users(span: Span, root_starts) -> bool:
    phase = span.phase
    if phase == semconv.UNATTRIBUTED:
        return True
    if phase is None:  # (suspects are phased spans)
        return False
    if span.name != semconv.phase_span_name(phase) or semconv.THREAD_NAME not in span.attributes:
        return False
    if any(key.startswith(_OURS) and key not in _PHASE_KEYS for key in span.attributes):
        return False
    return not (phase == semconv.PHASE_IMPORT and span.start_ns in root_starts().get(span.trace_id, ()))


def keep_user_phases_apart(spans: Iterable[Span]) -> list[Span]:
    """``spans``, with each user phase named like one of ours renamed ``<name> (user phase)``."""
    spans = spans if isinstance(spans, list) else list(spans)
    # a read or an aggregate of ours has more keys than phase() writes: told apart at once
    suspects = [i for i, s in enumerate(spans) if s.phase in _RESERVED and len(s.attributes) <= _MOST_USER_KEYS]
    if not suspects:
        return spans
    starts: dict[str, set] = {}

    def root_starts() -> dict[str, set]:  # only asked for an import span that looks like a user's
        if not starts:
            for span in spans:
                if span.is_root:
                    starts.setdefault(span.trace_id, set()).add(span.start_ns)
        return starts

    renamed = None
    for index in suspects:
        span = spans[index]
        if _is_users(span, root_starts):
            if renamed is None:
                renamed = list(spans)
            attributes = dict(span.attributes)
            attributes[semconv.PHASE] = f"{span.phase}{USER_SUFFIX}"
            renamed[index] = dataclasses.replace(span, attributes=attributes)
    return spans if renamed is None else renamed
