"""One answer per question: every rule that turns trace facts into a verdict lives here.

Which phase dominates a start-up (or that none does), whether a checkpoint read was
cold, partial or warm, how many CUDA graphs were captured, which spans lie inside the
start-up window, and how a typed attribute is read. The patches (cold thresholds), the
breakdown, the findings, the renderers, the metrics and the printed summary all ask this
module, so they cannot disagree (tests/analyze/test_verdicts.py runs one trace through all
of them).

Deliberately light: it imports only :mod:`otel_coldstart.semconv`, so the patches can use
it and ``import otel_coldstart`` stays cheap. Functions take duck-typed records (anything
with the attributes of :class:`~otel_coldstart.analyze.model.Span` or ``PhaseTime``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import semconv

# --- attribute typing -------------------------------------------------------------------
# The one set of typed attribute readers, each ``(attributes, key)``, and one rule for a bad
# value: a value of another type than the one asked for reads as absent (a bool is no number,
# a float no int, a string is not parsed: the trace readers already gave each value its type,
# analyze/_values.py). Absent is None, except for a count or byte total (``positive_int``),
# where absent, bad and not positive all read as 0: a sum can add it as it is.


def int_value(attributes: Mapping[str, Any], key: str) -> int | None:
    """An integer attribute; bools (a subclass of int in Python) are not integers here."""
    value = attributes.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def positive_int(attributes: Mapping[str, Any], key: str) -> int:
    """A count or byte total: the value when it is a positive integer, else 0."""
    value = int_value(attributes, key)
    return value if value is not None and value > 0 else 0


def str_value(attributes: Mapping[str, Any], key: str) -> str | None:
    """A string attribute; any other type reads as absent."""
    value = attributes.get(key)
    return value if isinstance(value, str) else None


def number_value(attributes: Mapping[str, Any], key: str) -> float | None:
    """A numeric attribute as a float; bools and other types read as absent."""
    value = attributes.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def frame_compile_index(compile_id: str | None) -> int | None:
    """The second number of dynamo's compile id (``coldstart.compile.id``): "3/1" is frame 3's
    second compilation ("!0/3/1" under compiled autograd, "3/1_2" a restart of it); 0 is a
    frame's first compilation, more a recompilation; None when the id does not say."""
    if not compile_id:
        return None
    parts = compile_id.strip("[]").split("/")
    head = parts[-1].split("_")[0] if len(parts) >= 2 else ""
    return int(head) if head.isdigit() else None


# --- cold / partial / warm --------------------------------------------------------------

# Reading from storage at least this share of the bytes asked for means the page cache did
# not hold them; below WARM_BELOW it did. Readahead can read a little more than asked.
COLD_AT_LEAST = 0.5
WARM_BELOW = 0.05

COLD_STATES = (semconv.CACHE_COLD, semconv.CACHE_PARTIAL)


def cache_state_from_reads(read_bytes: int, expected_bytes: int) -> str | None:
    """cold | warm | partial from the bytes storage delivered against the bytes asked for."""
    if expected_bytes <= 0:
        return None
    ratio = read_bytes / expected_bytes
    if ratio >= COLD_AT_LEAST:
        return semconv.CACHE_COLD
    if ratio < WARM_BELOW:
        return semconv.CACHE_WARM
    return semconv.CACHE_PARTIAL


def cache_state_from_residency(ratio: float) -> str:
    """cold | warm | partial from the share of the file's pages resident before the read."""
    if ratio >= 1 - WARM_BELOW:
        return semconv.CACHE_WARM
    if ratio <= 1 - COLD_AT_LEAST:
        return semconv.CACHE_COLD
    return semconv.CACHE_PARTIAL


def combine_cache_states(from_reads: str | None, from_residency: str | None) -> str | None:
    """One verdict from both kinds of evidence a file read has. Cold wins: the thread's read
    counter is a lower bound (the kernel's asynchronous readahead on mmap faults is not always
    charged to the faulting thread; seen here: 27 MiB charged for a 44 MiB cold file), and the
    residency measured before the read says directly that the pages were not cached. Warm
    needs every available piece to say warm."""
    states = [s for s in (from_reads, from_residency) if s is not None]
    if not states:
        return None
    if semconv.CACHE_COLD in states:
        return semconv.CACHE_COLD
    if all(s == semconv.CACHE_WARM for s in states):
        return semconv.CACHE_WARM
    return semconv.CACHE_PARTIAL


def shard_cache_state(recorded: str | None, read_bytes: int | None, size: int | None) -> str | None:
    """The verdict for one checkpoint read in a trace: the state the plugin recorded (it
    combined the read counter and the residency) wins; a trace without it (an older
    plugin, another tool) is judged from its read bytes with the same thresholds."""
    if recorded in (semconv.CACHE_COLD, semconv.CACHE_PARTIAL, semconv.CACHE_WARM):
        return recorded
    if read_bytes is not None and size:
        return cache_state_from_reads(read_bytes, size)
    return None


def is_cold(state: str | None) -> bool:
    """Cold or partial: some of the file's bytes came from storage."""
    return state in COLD_STATES


# --- weights still on storage at ready() (lazy weights) ----------------------------------

# Less than this still out of the page cache at ready(), or less than LAZY_MIN_SHARE of the
# file, is no "not read yet": the residency sample's own error is ~3 points of the file, and a
# few missing pages of a warm file (common on a busy machine) cost the first request nothing.
LAZY_MIN_BYTES = 1 << 20
LAZY_MIN_SHARE = 0.01


def is_lazily_unread(unread_bytes: int, size: int | None) -> bool:
    """Whether ``unread_bytes`` of a still-mapped file out of the page cache at ready() are
    worth saying (the runtime records them, the finding and the summary show them)."""
    return unread_bytes >= LAZY_MIN_BYTES and (not size or unread_bytes >= LAZY_MIN_SHARE * size)


# --- the dominant phase -----------------------------------------------------------------

DOMINANT_MIN_SHARE = 0.2  # below this share of the start-up's wall time no phase dominates


def dominates(phase_ns: int, total_ns: int) -> bool:
    """The one rule: a phase dominates when it holds at least DOMINANT_MIN_SHARE of the
    start-up's wall time."""
    return total_ns > 0 and phase_ns / total_ns >= DOMINANT_MIN_SHARE


def dominant_phase(phases: Iterable[Any], total_ns: int) -> Any | None:
    """The largest phase when it dominates, else None ("no phase dominates": e.g. a
    start-up that is mostly unattributed). ``phases``: records with ``phase`` and ``busy_ns``
    (one start-up's phases, or a capacity group's p50 per phase against its p50 start-up).
    Ties go to the first name in alphabetical order; unattributed time is never a phase."""
    top = None
    for item in phases:
        if item.phase == semconv.UNATTRIBUTED:
            continue
        if top is None or (-item.busy_ns, item.phase) < (-top.busy_ns, top.phase):
            top = item
    return top if top is not None and dominates(top.busy_ns, total_ns) else None


# --- the start-up window ----------------------------------------------------------------


def in_startup_window(span: Any, root: Any) -> bool:
    """A span counts toward a start-up when it lies within the root span's time."""
    return span.start_ns >= root.start_ns and span.end_ns <= root.end_ns


# --- CUDA graph captures ----------------------------------------------------------------


def _is_aggregate(span: Any) -> bool:
    return bool(span.attributes.get(semconv.AGGREGATE))


def capture_count(spans: Iterable[Any]) -> int:
    """CUDA graphs captured: a capture may be one span, a ``torch.cuda.graph`` span around
    capture_begin/end spans, or one aggregate of many. The leaves count (a container is
    not a capture of its own), an aggregate as its calls."""
    captures = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_GRAPH_CAPTURE]
    containers = {s.parent_id for s in captures}
    count = 0
    for span in captures:
        if span.span_id in containers:
            continue
        count += max(1, positive_int(span.attributes, semconv.CALLS)) if _is_aggregate(span) else 1
    return count


# --- the phase running now (a start-up in flight, or cut short) ---------------------------


def running_work(open_work: Sequence, main_thread_id: int | None):
    """Of the work open now (oldest first; items with ``thread_id``), the one that says
    which phase is running: the innermost (latest started) on the main thread if any runs
    there, else the latest started anywhere. None when nothing is open. One rule for the
    session's end reason, the progress records and the in-flight gauges."""
    if not open_work:
        return None
    on_main = [w for w in open_work if w.thread_id == main_thread_id]
    return (on_main or list(open_work))[-1]
