"""Start-ups from many inputs, trace by trace, without holding every span at once.

Everything the analysis does stays within one trace: the checks of what cannot be true,
rebuilding a killed start-up from its progress records, duplicate ids and parent loops,
grouping spans under their ``model.startup``, the breakdown. So the spans of a trace can be
analysed once all of them are read, and let go; what is kept is the start-ups they make.

The readers hand over batches (a JSON line, a document) in the order of the inputs. Every
``chunk_spans`` spans the chunk is closed: each trace read in it is analysed then, except
the traces of the last RECENT_BATCHES batches, which are likely to go on (one big start-up
in one file; the start-ups a Collector file interleaves) and stay in the next chunk. The end
of an input does not close it: 10,000 small files, one start-up each, would have their
traces analysed one at a time between reads, which measured 10-15% more CPU than in chunks
(benchmarks/RESULTS-analyzer.md). A trace that shows up again after it was analysed (split
over files, a long pause in a long Collector file) is analysed again at the end from all of
its spans: the ones read since are kept from then on, the ones read before are read again
from where they lie (readers.reread). The result is exactly what reading everything first
would give; memory is bounded by a chunk, the traces that cross chunks and the results
(10,000 start-ups of 60 spans: 150 MB instead of 450 MB, benchmarks/RESULTS-analyzer.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .breakdown import Breakdown, breakdowns
from .integrity import Notes, check, repair_noted
from .interrupted import complete_killed
from .model import Span

CHUNK_SPANS = 50_000  # about 30 MB of records
RECENT_BATCHES = 64  # a trace seen in these last batches is not analysed yet when a chunk closes

Where = dict[int, list[tuple[int, int]]]  # input -> batches (offset, length) in it


@dataclass
class TraceResult:
    """What one trace gave: its start-ups, and what its checks and repairs did."""

    startups: list[Breakdown]
    checks: Notes
    repairs: Notes
    spans: int  # its spans that could be true
    source: int = 0  # the input it was first read from


def analyse_trace(spans: list[Span], slim: bool = False) -> TraceResult:
    """The whole analysis of one trace's spans. ``slim``: keep of each start-up only what
    compare and capacity read (its phases, shards, root), not its spans."""
    kept, checks = check(spans)
    rebuilt, repairs = repair_noted(complete_killed(kept))
    startups = breakdowns(rebuilt, slim=slim)
    return TraceResult(startups, checks, repairs, len(kept))


@dataclass
class Assembler:
    """Batches in, :class:`TraceResult` per trace out (see the module's docstring)."""

    analyse: Callable[[list[Span]], TraceResult]
    reread: Callable[[Where, set[str]], list[Span]]  # the spans of these traces, read again from there
    chunk_spans: int = CHUNK_SPANS
    _chunk: dict[str, list[Span]] = field(default_factory=dict)  # the open chunk's spans, by trace
    _count: int = 0  # spans added since the chunk was last closed
    _batches: int = 0
    _last_batch: dict[str, int] = field(default_factory=dict)  # trace -> the batch it was last seen in
    _where: dict[str, Where] = field(default_factory=dict)  # where each trace was read, until it is whole
    _first: dict[str, int] = field(default_factory=dict)  # the input each trace was first read from
    _done: dict[str, TraceResult] = field(default_factory=dict)
    _again: dict[str, list[Span]] = field(default_factory=dict)  # traces seen after their chunk closed
    _where_again: dict[str, Where] = field(default_factory=dict)  # where those later spans were read

    def add(self, source: int, spans: list[Span], offset: int, length: int) -> None:
        groups: dict[str, list[Span]] = {}
        for span in spans:
            group = groups.get(span.trace_id)
            if group is None:
                group = groups[span.trace_id] = []
            group.append(span)
        for trace_id, group in groups.items():
            again = self._again.get(trace_id)
            if again is not None or trace_id in self._done:  # its chunk closed: keep what follows
                if again is None:
                    self._again[trace_id] = again = []
                again.extend(group)
                self._where_again.setdefault(trace_id, {}).setdefault(source, []).append((offset, length))
            else:
                if trace_id not in self._chunk:
                    self._chunk[trace_id] = []
                    self._first.setdefault(trace_id, source)
                self._chunk[trace_id].extend(group)
                self._last_batch[trace_id] = self._batches
                self._where.setdefault(trace_id, {}).setdefault(source, []).append((offset, length))
        self._batches += 1
        self._count += len(spans)
        if self._count >= self.chunk_spans:
            self.close_chunk()

    def close_chunk(self, everything: bool = False) -> None:
        """Analyse the traces of the open chunk, but the ones still being read (seen in the
        last RECENT_BATCHES batches) unless ``everything``."""
        chunk, self._chunk, self._count = self._chunk, {}, 0
        recent = self._batches - RECENT_BATCHES
        for trace_id, spans in chunk.items():
            if not everything and self._last_batch[trace_id] >= recent:
                self._chunk[trace_id] = spans  # likely to go on: kept, and not counted again
                continue
            del self._last_batch[trace_id]
            result = self.analyse(spans)
            result.source = self._first[trace_id]
            self._done[trace_id] = result

    def finish(self, keep_where: bool = False) -> dict[str, TraceResult]:
        """Every trace's result, each trace read again in full where it crossed chunks.
        ``keep_where``: keep where each trace was read (``where``), for a caller that puts
        together traces several assemblers read parts of."""
        self.close_chunk(everything=True)
        for trace_id, later in self._again.items():
            result = self.analyse(self.reread(self._where[trace_id], {trace_id}) + later)
            result.source = self._first[trace_id]
            self._done[trace_id] = result
        self._again.clear()
        if not keep_where:
            self._where.clear()
            self._where_again.clear()
        return self._done

    @property
    def where(self) -> dict[str, Where]:
        """Where each trace was read, every batch of it."""
        merged = dict(self._where)
        for trace_id, later in self._where_again.items():
            where = {source: list(batches) for source, batches in merged.get(trace_id, {}).items()}
            for source, batches in later.items():
                where.setdefault(source, []).extend(batches)
            merged[trace_id] = where
        return merged
