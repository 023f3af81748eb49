"""A server's own start-up spans as the start-up's outline (vLLM's, today).

vLLM traces its start-up with OpenTelemetry: ``@instrument(span_name=...)`` spans ("API server
setup", "Overall Loading", "EngineCoreProc init", "Executor init", "Worker init", "Init
device", "Load model", "Load weights", "Prepare model", "Capture model", ...), each with
``code.namespace``/``code.function`` attributes, in several processes (API server, engine
core, workers) of one trace: a process it spawns inherits the span then current through a
``traceparent`` environment variable (vllm/tracing/otel.py: ``propagate_trace_to_env``,
``_get_smart_context``). otel-coldstart's vLLM plugin roots each process's ``model.startup``
under that span, and our phases nest under vLLM's current span ("Load weights" ->
deserialize).

When one trace holds such spans and our roots, it is one start-up, not one per process:
:func:`server_startups` replaces those roots' groups by one breakdown whose root spans them
all (the outermost of vLLM's topmost spans and our roots, with its window widened to cover
all of them), computed across processes (unattributed: the time no phase of any process
covers), with the outline: vLLM's spans and our per-process roots as a tree, each with the
self time of our phases inside it and its own time that nothing finer covers. The dominant
phase is then chosen among those finest pieces (:func:`finest_phases`).

A front end whose own root is in another trace (vLLM's first span there started with no
``traceparent`` to join) stays a start-up of its own: traces are not joined by guesswork.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .. import semconv
from .breakdown import Breakdown, PhasedSpans, PhaseTime, breakdown_and_tree
from .model import Span

# vLLM's start-up span names (vllm/entrypoints/openai/api_server.py, v1/engine/core_client.py,
# core.py, v1/executor/abstract.py, multiproc_executor.py, v1/worker/gpu_worker.py,
# gpu_model_runner.py, model_executor/model_loader/base_loader.py, default_loader.py). A span
# whose code.namespace is in vLLM (its @instrument decorator records it) counts too, so a
# version's new names need no change here.
VLLM_STARTUP_SPANS = frozenset({
    "API server setup", "Overall Loading", "EngineCoreProc init", "Executor init", "Worker init",
    "Init device", "Load model", "Load weights", "Loading (GPU)", "Prepare model", "Capture model",
    "Warmup (GPU)", "Download weights - HF",
})
CODE_NAMESPACE = "code.namespace"  # OTel's code attribute, set by vLLM's @instrument
MAX_NODES = 200  # an outline is read by people: the longest nodes are kept


@dataclass(frozen=True)
class OutlineNode:
    """One span of the outline: a server span, or one process's ``model.startup``."""

    name: str
    span_id: str
    depth: int
    start_ns: int
    end_ns: int
    process: str | None  # vllm.process_name, else service.name and pid, where the resource says
    kind: str  # "server" | "startup"
    phases: tuple[tuple[str, int], ...]  # (phase, self ns) of our phased spans whose nearest outline node it is
    own_ns: int  # its time that no child node and no phase inside it covers

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


def is_server_startup_span(span: Span) -> bool:
    if span.phase is not None or span.is_root or span.name.startswith(semconv.SPAN_PREFIX):
        return False
    if span.name in VLLM_STARTUP_SPANS:
        return True
    namespace = span.attributes.get(CODE_NAMESPACE)
    return isinstance(namespace, str) and (namespace == "vllm" or namespace.startswith("vllm."))


def server_startups(spans: Sequence[Span], groups: list[tuple[Span, list[Span]]],
                    foreign_by_trace: dict[str, list[Span]], context: bool = True, slim: bool = False,
                    ) -> tuple[list[Breakdown], list[tuple[Span, list[Span]]]]:
    """The breakdowns of the traces whose processes make one server start-up, and the groups
    left to analyse one root each. ``context=False``: no spans that are not ours in them;
    ``slim``: only what compare and capacity read (Breakdown.slim); either way still one
    start-up per server."""
    server_by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span.phase is None and not span.is_root and is_server_startup_span(span):
            server_by_trace[span.trace_id].append(span)
    if not server_by_trace:
        return [], groups
    by_trace: dict[str, list[tuple[Span, list[Span]]]] = defaultdict(list)
    rest = []
    for group in groups:
        if group[0].trace_id in server_by_trace:
            by_trace[group[0].trace_id].append(group)
        else:
            rest.append(group)
    trace_spans: dict[str, dict[str, Span]] = defaultdict(dict)  # one pass, only for those traces
    for span in spans:
        if span.trace_id in by_trace:
            trace_spans[span.trace_id][span.span_id] = span
    combined = [_combine(server_by_trace[trace], trace_groups, trace_spans[trace], foreign_by_trace.get(trace, ()),
                         context, slim)
                for trace, trace_groups in by_trace.items()]
    return combined, rest


def _combine(server: list[Span], groups: list[tuple[Span, list[Span]]], trace_spans: dict[str, Span],
             foreign: Sequence[Span], context: bool = True, slim: bool = False) -> Breakdown:
    roots = [root for root, _ in groups]
    if len(groups) == 1 and all(roots[0].start_ns <= s.start_ns and s.end_ns <= roots[0].end_ns for s in server):
        # One process ran the server inside its start-up (vLLM offline, in-process): its own
        # breakdown, as without the outline, and the outline beside it.
        root, group_members = groups[0]
        known = {m.span_id for m in group_members}
        members = list(group_members) + [s for s in server if s.span_id not in known]
        breakdown, tree = breakdown_and_tree(root, members, foreign, context, slim=slim)
        if slim:
            return breakdown
        return dataclasses.replace(breakdown, outline=_outline(root, tree, {s.span_id for s in server}, {root.span_id}))
    server_ids = {s.span_id for s in server}
    root_ids = {r.span_id for r in roots}
    outline_ids = server_ids | root_ids
    # The topmost pieces: server spans and roots with no server span or root above them.
    tops = [s for s in server + roots if _outline_parent(s, trace_spans, outline_ids) is None]
    base = min(tops, key=lambda s: (s.start_ns, -s.duration_ns, s.span_id))
    start = min(s.start_ns for s in tops + roots)
    end = max(s.end_ns for s in tops + roots)
    attrs = dict(base.attributes) if base.is_root else {}
    ready = all(r.attributes.get(semconv.READY) is True for r in roots)
    attrs[semconv.READY] = ready
    not_ready = next((r for r in sorted(roots, key=lambda r: r.start_ns)
                      if r.attributes.get(semconv.READY) is not True), None)
    for key in (semconv.END_REASON, semconv.END_PHASE, semconv.END_EXCEPTION_TYPE):
        attrs.pop(key, None)
        source = not_ready if not_ready is not None else roots[0]
        if key in source.attributes:
            attrs[key] = source.attributes[key]
    for key in (semconv.RANK, semconv.WORLD_SIZE, semconv.LOCAL_RANK, semconv.THREAD_ID, semconv.THREAD_NAME):
        attrs.pop(key, None)  # the start-up of several processes has no single rank or thread
    root = Span(base.trace_id, base.span_id, base.parent_id, semconv.SPAN_ROOT, start, end, attrs, base.resource,
                base.status)
    members = []
    seen = {root.span_id}
    grouped = [span for group_root, group_members in groups for span in (group_root, *group_members)]
    for span in [*grouped, *server]:
        if span.span_id not in seen:
            seen.add(span.span_id)
            members.append(span)
    breakdown, tree = breakdown_and_tree(root, members, foreign, context, across_processes=True, slim=slim)
    if slim:
        return breakdown
    # When the outermost piece is a server span, the start-up's root stands in for it; the
    # outline shows the span itself.
    shown = None if base.is_root else base
    return dataclasses.replace(breakdown, outline=_outline(root, tree, server_ids, root_ids, shown))


def _outline_parent(span: Span, by_id: dict[str, Span], outline_ids: set[str]) -> str | None:
    """The nearest server span or root above ``span`` (through spans of any other kind)."""
    parent_id, steps = span.parent_id, 0
    while parent_id is not None and steps < 256:
        if parent_id in outline_ids:
            return parent_id
        parent = by_id.get(parent_id)
        if parent is None:
            return None
        parent_id, steps = parent.parent_id, steps + 1
    return None


def _outline(root: Span, tree: PhasedSpans, server_ids: set[str], root_ids: set[str],
             shown: Span | None = None) -> tuple[OutlineNode, ...]:
    """The outline of a start-up whose phased spans the breakdown found (``tree``)."""
    by_id = tree.by_id
    outline_ids = (server_ids | root_ids) & set(by_id)
    nodes = {i: by_id[i] for i in outline_ids}
    if shown is not None:
        nodes[shown.span_id] = shown
    parent_of = {i: _outline_parent(by_id[i], by_id, outline_ids) for i in nodes}
    names = _process_names(nodes.values())
    # Our phased spans: each to its nearest outline node, with its self time.
    children, orphans = tree.children, tree.orphans
    inside: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    covering: dict[str, list[Span]] = defaultdict(list)
    for span, own in zip(tree.window, tree.own):
        node = _outline_parent(span, by_id, outline_ids)
        if node is None or span.phase is None:  # (the window holds phased spans only)
            continue
        inside[node][span.phase] += own
        covering[node].append(span)
    # What each process was doing, for the server spans of other processes that waited for it
    # (the engine core's "Prepare model" while the workers compile and capture over RPC).
    busy_by_process: dict[str | None, list[Span]] = defaultdict(list)
    process_of: dict[int, str | None] = {}  # by resource: a process's spans share one (a batch's)
    for span in children.get(root.span_id, []) + orphans:
        resource = id(span.resource)
        if resource not in process_of:
            process_of[resource] = _process_key(span)
        busy_by_process[process_of[resource]].append(span)
    kids: dict[str | None, list[str]] = defaultdict(list)
    for node_id, parent_id in parent_of.items():
        kids[parent_id].append(node_id)
    out: list[OutlineNode] = []
    # Depth first, children in time order, with a stack of our own: a nested function that
    # calls itself is a reference cycle holding every span of the trace, which lives on until
    # the cyclic collector runs (paused while a fleet is read: 200 MB at 10,000 start-ups).
    by_start = lambda i: (nodes[i].start_ns, i)  # noqa: E731
    stack = [(top, 0) for top in sorted(kids.get(None, ()), key=by_start, reverse=True)]
    while stack:
        node_id, depth = stack.pop()
        span = nodes[node_id]
        covers = [nodes[k] for k in kids.get(node_id, ())] + covering.get(node_id, [])
        if node_id not in root_ids:
            own_process = _process_key(span)
            covers += [s for process, spans in busy_by_process.items() if process != own_process for s in spans
                       if s.end_ns > span.start_ns and s.start_ns < span.end_ns]
        out.append(OutlineNode(
            name=span.name, span_id=node_id, depth=depth, start_ns=span.start_ns, end_ns=span.end_ns,
            process=names.get(_process_key(span)) or _process_label(span),
            kind="startup" if node_id in root_ids else "server",
            phases=tuple(sorted(inside.get(node_id, {}).items(), key=lambda item: (-item[1], item[0]))),
            own_ns=_uncovered(span, covers)))
        stack += [(child_id, depth + 1) for child_id in sorted(kids.get(node_id, ()), key=by_start, reverse=True)]
    if len(out) > MAX_NODES:
        keep = {n.span_id for n in sorted(out, key=lambda n: -n.duration_ns)[:MAX_NODES]}
        out = [n for n in out if n.span_id in keep]
    return tuple(out)


def _process_key(span: Span) -> str | None:
    """The process a span was recorded in: its pid, whichever tracer wrote it (vLLM's
    resource has ``vllm.process_id``, ours ``process.pid``)."""
    resource = span.resource
    pid = resource.get("vllm.process_id")
    if pid is None:
        pid = resource.get("process.pid")
    return str(pid) if isinstance(pid, (int, str)) and not isinstance(pid, bool) and pid != "" else None


def _process_names(spans) -> dict[str | None, str]:  # None is never a key (a span without a pid asks for it)
    """vLLM's name of each process (``vllm.process_name``), by pid, for our spans there too."""
    names: dict[str | None, str] = {}
    for span in spans:
        name = span.resource.get("vllm.process_name")
        key = _process_key(span)
        if isinstance(name, str) and name and key is not None:
            names[key] = name
    return names


def _uncovered(span: Span, covers: list[Span]) -> int:
    """``span``'s time that none of ``covers`` (clipped to it) covers."""
    cursor, uncovered = span.start_ns, 0
    for c in sorted(covers, key=lambda s: s.start_ns):
        start, end = max(c.start_ns, span.start_ns), min(c.end_ns, span.end_ns)
        if end <= start:
            continue
        if start > cursor:
            uncovered += start - cursor
        cursor = max(cursor, end)
    return uncovered + max(0, span.end_ns - cursor)


def _process_label(span: Span) -> str | None:
    kind = span.resource.get("vllm.process_kind")
    if isinstance(kind, str) and kind:
        return kind
    pid = _process_key(span)
    return f"pid {pid}" if pid is not None else None


def finest_phases(b: Breakdown) -> list[PhaseTime]:
    """Our phases and each server span's own time (named after the span), largest first: the
    candidates for the dominant phase of a start-up with an outline."""
    own: dict[str, list[int]] = {}
    for node in b.outline:
        if node.kind == "server" and node.own_ns > 0:
            own.setdefault(node.name, []).append(node.own_ns)  # the same step in several workers: summed
    taken = {p.phase for p in b.phases}
    pieces = list(b.phases) + [PhaseTime(name, sum(times), len(times), 0) for name, times in own.items()
                               if name not in taken]
    return sorted(pieces, key=lambda p: (-p.busy_ns, p.phase))
