"""The text report: what ``analyze`` prints and the summary printed when a start-up ends.
``render_text(report, out)`` is the format's renderer (analyze/report.py: one signature for
every format); the functions below it write its parts. They never compute."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import TYPE_CHECKING, TextIO

from .. import semconv
from ..verdicts import DOMINANT_MIN_SHARE
from .breakdown import Breakdown, bandwidth_warnings, by_trace
from .downloads import lines as download_lines, shard_notes
from .escape import terminal_text as _t  # every string from a trace: no control characters
from .first_request import lines as first_request_lines
from .grouped_findings import group as group_findings, several_startups
from .labels import distinct_labels, shorten
from .lazy import lines as lazy_lines
from .own_cost import shown as shown_own_cost
from .render_explain import render_explain_text
from .render_interrupted import render_killed_text, render_stalls_text, state_text
from .shard_rows import shard_rows
from .units import format_bytes, format_rate, format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from .report import Report


def render_text(report: Report, out: TextIO) -> None:
    """Every start-up (the ranks of a multi-process start-up together, with a line per rank),
    then the findings."""
    groups = list(by_trace(report.startups).values())
    for number, group in enumerate(groups):
        if number:
            out.write("\n")
        for index, item in enumerate(group):
            if index:
                out.write("\n")
            render_startup_text(item, out)
        if len(group) > 1:
            render_ranks_text(group, out)
    out.write("\n")
    if several_startups(report.startups):
        render_grouped_findings_text(report.findings, len(report.startups), out)
    else:
        render_findings_text(report.findings, out)


def render_startup_text(breakdown: Breakdown, out: TextIO) -> None:
    """One screen: the phases, their shares, the dominant one flagged, unattributed shown."""
    total = breakdown.duration_ns
    state = state_text(breakdown) or breakdown.end_description
    rank = ""
    if breakdown.rank is not None:
        rank = f" rank {breakdown.rank}" + (f"/{breakdown.world_size}" if breakdown.world_size else "")
    out.write(f"model.startup {format_seconds(total)} ({state}){rank} trace {_t(breakdown.root.trace_id)}\n")
    render_killed_text(breakdown, out)
    width = column_width([_t(item.phase) for item in breakdown.phases] + [semconv.UNATTRIBUTED], minimum=16)
    out.write(f"  {'phase':<{width}}{'time':>10}{'share':>8}{'bytes':>12}{'throughput':>14}{'spans':>7}\n")
    dominant = breakdown.dominant
    own = shown_own_cost(breakdown)  # the plugin's own work, said under the phases it landed in
    for item in breakdown.phases:
        flag = "  <- dominant" if dominant is not None and item is dominant else ""
        out.write(
            f"  {shorten(_t(item.phase), width - 2):<{width}}{format_seconds(item.busy_ns):>10}"
            f"{item.share_of(total) * 100:>7.1f}%{format_bytes(item.bytes or None):>12}"
            f"{format_rate(item.throughput) + ('!' if item.above_bound else ''):>14}{item.spans:>7}{flag}\n"
        )
        own_line = own.by_phase.get(item.phase)
        if own_line:
            out.write(f"    {own_line}\n")
    unattributed_share = breakdown.unattributed_ns / total * 100 if total else 0.0
    out.write(
        f"  {semconv.UNATTRIBUTED:<{width}}{format_seconds(breakdown.unattributed_ns):>10}"
        f"{unattributed_share:>7.1f}%\n"
    )
    own_line = own.by_phase.get(semconv.UNATTRIBUTED)  # the plugin's work between its spans
    if own_line:
        out.write(f"    {own_line}\n")
    if own.total:
        out.write(f"  {own.total}\n")
    for warning in bandwidth_warnings(breakdown):
        out.write(f"  ! {_t(warning)}\n")
    if breakdown.parallelism > 1.05:
        out.write(f"  parallelism {breakdown.parallelism:.2f}x (busy time across threads / wall time)\n")
    for line in download_lines(breakdown):  # what was fetched before it could be read
        out.write(f"  {_t(line)}\n")
    if breakdown.shards:
        out.write("  shards:\n")
        listed, rest = shard_rows(breakdown.shards)  # 2,000 files: the cold and slowest, then one line
        names = [_t(shard.name) for shard in listed]
        name_width = column_width(names, minimum=40)
        names = distinct_labels(names, name_width - 2)  # cut in the middle: the shard number and the end show
        index_width = column_width([f"#{s.index}" for s in listed if s.index is not None], minimum=4)
        notes = shard_notes(breakdown)  # shards whose file this start-up's download wrote
        for shard, name in zip(listed, names):
            index = f"#{shard.index}" if shard.index is not None else "  "
            out.write(
                f"    {index:<{index_width}}{name:<{name_width}}{format_bytes(shard.size):>11}"
                f"{format_seconds(shard.duration_ns):>10}  {_t(shard_state_text(shard) + notes.get((shard.path, shard.start_ns), ''))}\n"
            )
        if rest is not None:
            out.write(f"    {rest.describe()} (every one in --format json)\n")
        failed = len(breakdown.shards) - len(breakdown.read_shards)
        if failed:
            out.write(f"    {failed} checkpoint read(s) failed: listed, and left out of cold rates, "
                      "throughput and savings\n")
    for line in lazy_lines(breakdown):  # files still partly on storage at ready(), and their first use
        out.write(f"  {_t(line)}\n")
    for line in first_request_lines(breakdown):  # the first request after ready(), and what it paid
        out.write(f"  {_t(line)}\n")
    if breakdown.context:
        out.write("  context (spans that are not ours):\n")
        for context in breakdown.context[:5]:
            inside = f" contains {_t(', '.join(context.phases_inside))}" if context.phases_inside else ""
            where = " (encloses the start-up)" if context.encloses_root else ""
            out.write(f"    {shorten(_t(context.name), 38):<40}{format_seconds(context.duration_ns):>10}{where}{inside}\n")
    render_explain_text(breakdown, out)  # imports, compilations, captures: why those phases took long
    out.write(f"  {_t(dominant_line(breakdown))}\n")
    render_stalls_text(breakdown, out)
    if unattributed_share >= 50:
        out.write(
            "  most of the start-up is unattributed: wrap the slow step in "
            "otel_coldstart.phase('name') to name it\n"
        )


def columns(rows: Sequence[Sequence[str]], right: Set[int] = frozenset()) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell and two spaces from the
    next: however long a value gets ("+3.79 s" beside "3058.47x"), columns never run
    together. ``right``: the columns aligned right (numbers)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    lines = []
    for row in rows:
        cells = [cell.rjust(width) if i in right else cell.ljust(width) for i, (cell, width) in
                 enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


MAX_COLUMN = 60  # a longer name (a generated phase name, a deep path) is cut, not the table


def column_width(values: Sequence[str], minimum: int) -> int:
    """Wide enough for the longest value plus two spaces, within [minimum, MAX_COLUMN]."""
    longest = max((len(v) for v in values), default=0)
    return max(minimum, min(longest + 2, MAX_COLUMN))


def shard_state_text(shard) -> str:
    """What a checkpoint read tells: its cache state and the bytes storage delivered, or
    that it failed and with what (then nothing else: a failed read is no evidence)."""
    if shard.failed:
        return f"FAILED ({shard.error_type})" if shard.error_type else "FAILED"
    evidence = ""
    if shard.read_bytes is not None:
        evidence = f", {format_bytes(shard.read_bytes)} read from storage"
    elif shard.read_unknown:
        evidence = f", storage reads unknown ({shard.read_unknown})"
    if shard.folded:  # one row for many small files: their verdicts counted
        counted = ", ".join(f"{n:,} {state}" for state, n in shard.file_states)
        return f"{shard.state or 'cache ?'} ({counted}){evidence}"
    return (shard.state or "cache ?") + evidence


def dominant_line(b: Breakdown) -> str:
    """The one wording of the dominant-phase verdict (verdicts.dominant_phase), shared by
    the text summary and the Markdown and HTML reports."""
    total = b.duration_ns
    dominant = b.dominant
    if dominant is not None:
        return (f"dominant phase: {dominant.phase} "
                f"({format_seconds(dominant.busy_ns)}, {dominant.share_of(total) * 100:.0f}% of start-up)")
    largest = b.largest
    if largest is None:
        return "dominant phase: none (no phase recorded)"
    return (f"dominant phase: none (the largest, {largest.phase}, is {largest.share_of(total) * 100:.0f}% "
            f"of start-up; a phase dominates from {DOMINANT_MIN_SHARE * 100:.0f}%)")


def render_ranks_text(group: Sequence[Breakdown], out: TextIO) -> None:
    """One line per rank of a multi-process start-up that shared one trace."""
    phases = sorted({p.phase for b in group for p in b.phases[:3]})
    out.write(f"ranks of trace {_t(group[0].trace_id)}:\n")
    out.write(f"  {'rank':<6}{'total':>10}" + "".join(f"{_t(p)[:12]:>13}" for p in phases) + f"{'host':>18}\n")
    for item in group:
        cells = "".join(f"{format_seconds(phase.busy_ns) if phase else '-':>13}" for phase in map(item.phase, phases))
        host = item.root.resource.get("host.name")
        rank = "?" if item.rank is None else str(item.rank)
        out.write(f"  {rank:<6}{format_seconds(item.duration_ns):>10}{cells}{_t(host or '-')[:16]:>18}\n")


def render_findings_text(findings: Sequence, out: TextIO) -> None:
    """Findings, largest estimated saving first, each with its evidence and lever."""
    if not findings:
        out.write("findings: none\n")
        return
    out.write("findings (largest estimated saving first):\n")
    for number, finding in enumerate(findings, start=1):
        rank = f" [rank {finding.rank}]" if finding.rank is not None else ""
        out.write(f"  {number}. {_t(finding.title)}{rank} ({saving_text(finding)})\n")
        for line in finding.evidence:
            out.write(f"       - {_t(line)}\n")
        out.write(f"       lever: {_t(finding.lever)}\n")


def render_grouped_findings_text(findings: Sequence, startups: int, out: TextIO) -> None:
    """Findings over several start-ups, each rule once: in how many start-ups, its figures as
    the range seen (analyze/grouped_findings.py); JSON keeps each start-up's own."""
    if not findings:
        out.write("findings: none\n")
        return
    out.write(f"findings over {startups} start-ups, each once (largest estimated saving first):\n")
    for number, item in enumerate(group_findings(findings, startups), start=1):
        out.write(f"  {number}. {_t(item.title)} (in {item.count} of {startups} start-ups; "
                  f"{grouped_saving_text(item)})\n")
        for line in item.evidence:
            out.write(f"       - {_t(line)}\n")
        out.write(f"       lever: {_t(item.lever)}\n")
        if not item.same_words:
            out.write(f"       (words and figures of trace {_t(item.findings[0].trace_id[:16])}, the largest saving; "
                      "each start-up's own in --format json)\n")


def grouped_saving_text(item) -> str:
    """A group's saving as the range its start-ups' findings state (every format's)."""
    low, high = item.savings_ns
    if not high:
        return "saving not estimated"
    shown = format_seconds(high) if format_seconds(low) == format_seconds(high) \
        else f"{format_seconds(low)}–{format_seconds(high)}"
    first = "the first requests " if getattr(item.findings[0], "saves_first_requests", False) else ""
    return f"could save {first}~{shown}"


def saving_text(finding) -> str:
    if not finding.saving_ns:
        return "saving not estimated"
    if getattr(finding, "saves_first_requests", False):
        return f"could save the first requests ~{format_seconds(finding.saving_ns)}"
    return f"could save ~{format_seconds(finding.saving_ns)}"
