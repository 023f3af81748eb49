"""The phase that dominates the start-up (verdicts.dominant_phase: at least 20% of it;
"none dominates" gives no finding), with the lever that usually moves it.

Estimate: the projection of the ``whatif`` lever that is the phase's lever (deserialize:
prewarm, cast: serving-dtype, h2d: pinned, compile: compile-cache, graph_capture:
fewer-captures; the same figure ``whatif --lever X`` gives for this start-up). A lever that
does not apply states no saving (a resident checkpoint cannot be pre-warmed); a phase
without one names where the time goes and claims no saving (0, "not estimated"): no flat
guess that would rank it above findings that measured theirs.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..explain import import_summary
from ..storage_floor import StorageFloor
from ..units import format_bytes, format_rate, format_seconds
from . import _transformers
from ._finding import Finding, claim
from ._levers import lever_saving

LEVERS = {
    semconv.PHASE_IMPORT: "import less at start-up: defer optional imports the server does not need before "
                          "ready(), trim the image's site-packages",
    semconv.PHASE_RUNTIME_INIT: "keep a pre-initialised process pool, set CUDA_MODULE_LOADING=LAZY, "
                                "or restore from a checkpointed process",
    semconv.PHASE_DOWNLOAD: "bake the weights into the image or a node-local cache; download shards in parallel",
    semconv.PHASE_DESERIALIZE: "store safetensors on local NVMe and pre-warm the page cache; "
                               "read fewer, larger files",
    semconv.PHASE_ALLOCATE: "allocate on the target device directly (device_map / meta-device init)",
    semconv.PHASE_PIN: "pin one reusable staging buffer instead of every tensor",
    semconv.PHASE_H2D: "copy from pinned memory with non_blocking=True, overlap copies with reads",
    semconv.PHASE_D2H: "avoid round trips to the host during load",
    semconv.PHASE_D2D: "shard on load instead of loading then redistributing",
    semconv.PHASE_H2H: "load straight into the destination tensors (no intermediate CPU copy)",
    semconv.PHASE_CAST: "save the checkpoint in the serving dtype so no cast is needed",
    semconv.PHASE_COMPILE: "cache compiled artifacts across starts (TORCHINDUCTOR_CACHE_DIR, AOT compile)",
    semconv.PHASE_GRAPH_CAPTURE: "capture fewer batch sizes or capture lazily on first use",
    semconv.PHASE_WARMUP: "shorten warm-up to the shapes actually served",
}
# The whatif lever (analyze/whatif/) that projects each phase's lever above.
PHASE_LEVERS = {semconv.PHASE_DESERIALIZE: "prewarm", semconv.PHASE_CAST: "serving-dtype",
                semconv.PHASE_H2D: "pinned", semconv.PHASE_COMPILE: "compile-cache",
                semconv.PHASE_GRAPH_CAPTURE: "fewer-captures"}


def check(breakdown: Breakdown, floor: StorageFloor | None = None, given=None) -> list[Finding]:
    top = breakdown.dominant
    total = breakdown.duration_ns
    if top is None:
        return []
    evidence = [f"{top.phase}: {format_seconds(top.busy_ns)} of {format_seconds(total)} "
                f"({top.share_of(total) * 100:.0f}%) over {top.spans} span(s)"]
    if top.bytes:  # queued device work whose time is unknown has bytes but no bandwidth
        rate = top.throughput
        evidence.append(format_bytes(top.bytes) + (f" at {format_rate(rate)}" if rate is not None else ""))
    if top.phase == semconv.PHASE_CAST:
        pairs = sorted({(str(s.attributes.get(semconv.CAST_FROM)), str(s.attributes.get(semconv.CAST_TO)))
                        for s in breakdown.spans if s.phase == top.phase and semconv.CAST_FROM in s.attributes})
        if pairs:
            evidence.append("casts: " + ", ".join(f"{a} -> {b}" for a, b in pairs[:4]))
    lever = LEVERS.get(top.phase, f"wrap the steps inside {top.phase!r} in finer phases to see which one to cut")
    library_step = _transformers.explain(top.phase, breakdown.spans)  # a step inside code the user does not own
    if library_step is not None:
        evidence.extend(library_step[0])
        lever = library_step[1]
    server_step = any(n.kind == "server" and n.name == top.phase for n in breakdown.outline)
    if library_step is None and top.phase not in LEVERS and server_step:
        # The finest piece is a server span's own time (analyze/outline.py): not ours to wrap.
        evidence.append(f"the own time of the server's {top.phase!r} span(s): no child span and no otel-coldstart "
                        "phase covers it")
        lever = (f"look inside the server's {top.phase!r} step (its code.function, the server's logs): "
                 "otel-coldstart records no phase there yet")
    if top.phase == semconv.PHASE_IMPORT:
        lever = _import_lever(breakdown, evidence) or lever
        own_ns = plugin_import_ns(breakdown)
        if own_ns:  # the plugin's own import is not the host's to trim: out of the lever and saving
            evidence.append(f"of which otel-coldstart's own import and set-up: {format_seconds(own_ns)} "
                            "(not the host's to trim)")
            lever = f"{lever} (the {format_seconds(own_ns)} otel-coldstart itself takes excluded)"
    runner_up = breakdown.runner_up  # among the dominant phase's own candidates (an outline's steps too)
    if runner_up is not None:
        evidence.append(f"next: {runner_up.phase} {format_seconds(runner_up.busy_ns)}")
    saving, estimate = 0, "not estimated: the trace holds no reference time for this phase"
    what_if = PHASE_LEVERS.get(top.phase)
    if what_if is not None and lever == LEVERS.get(top.phase):  # not a library step's own lever
        projected = lever_saving(breakdown, what_if, floor, given)
        # the lever's projection through this phase's spans (prewarm also saves storage reads
        # inside casts: that part is another phase's)
        saving = projected.part(s.span_id for s in breakdown.spans if s.phase == top.phase) if projected.ns else 0
        estimate = projected.estimate
    return [Finding.about(
        breakdown, rule="dominant_phase", phase=top.phase,
        title=f"{top.phase} dominates the start-up ({top.share_of(total) * 100:.0f}%)",
        evidence=evidence,
        lever=lever,
        saving_ns=saving, share=top.share_of(total), estimate=estimate,
        claims=[claim(breakdown, saving, ("phase", top.phase))] if saving else [],
    )]


def _import_lever(breakdown: Breakdown, evidence: list[str]) -> str | None:
    """The import lever from the trace's own coldstart.import spans (patches/imports.py): which
    top-level import is slowest and what inside it takes the time."""
    summary = import_summary(breakdown)
    if summary is None or not summary.imports:
        return None
    evidence.append("slowest imports after instrument(): " + "; ".join(
        f"{i.module} {format_seconds(i.ns)}" + (f" ({i.modules} modules)" if i.modules else "")
        for i in summary.imports[:3]))
    biggest = summary.imports[0]
    # An import made by a library step whose work is importing (transformers' import of the
    # model's code): that step's lever fits better than "import it lazily".
    parent = _parent(breakdown, biggest)
    step = _transformers.explain(parent.phase, breakdown.spans) if parent is not None and parent.phase else None
    if step is not None:
        evidence.append(f"{biggest.module} was imported by {parent.phase}")
        return step[1]
    own_package = biggest.module.partition(".")[0]
    during = _during(parent)
    if biggest.importer is not None:
        evidence.append(f"{biggest.module} was imported at {biggest.importer}{during}")
    for runner_up in summary.imports[1:3]:  # listed above: say so where a library imported it itself
        if runner_up.imported_by_itself:
            evidence.append(f"{runner_up.module} was imported by {runner_up.module.partition('.')[0]} itself, at "
                            f"{runner_up.importer}{_during(_parent(breakdown, runner_up))}")
    others = [(package, ns) for package, ns in biggest.packages if package != own_package]
    if others and others[0][1] >= 0.2 * biggest.ns:
        package, ns = others[0]
        what = (f"`import {biggest.module}` takes {format_seconds(biggest.ns)}, "
                f"{format_seconds(ns)} of it importing {package}")
    else:
        heavy = ", ".join(f"{m} {format_seconds(ns)}" for m, ns in biggest.heaviest[:2])
        what = f"`import {biggest.module}` takes {format_seconds(biggest.ns)}"
        what += f" (heaviest: {heavy})" if heavy else ""
    cause = _import_cause(biggest, evidence)
    if cause is not None:
        return f"{what}: {cause}"
    if biggest.imported_by_itself:
        # torch importing torch._dynamo from its meta-device init, say: moving an import
        # statement of the user's changes nothing; the call into the library that needs it does.
        return (f"{what}: {own_package} imports it itself ({biggest.importer}{during}), so no import of yours "
                f"moves it: change or avoid the call into {own_package} there that needs it; defer other optional "
                "imports, trim the image's site-packages")
    if _needed_before_ready(breakdown, own_package):
        # Importing lazily only moves the cost to the load that needs it, before ready() still.
        return (f"{what}: the server uses {own_package} before ready(), so importing it later only moves the "
                f"cost; remove it: fork the serving processes from one that has imported {own_package} (a "
                "pre-forked worker pool), keep a warm pool of interpreters, or avoid its optional heavy "
                f"sub-imports ({_optional_example(breakdown, own_package)})")
    return (f"{what}: import it lazily where it is first used (nothing before ready() used it), or trim what it "
            "pulls in; defer other optional imports, trim the image's site-packages")


# Phases that a model server's libraries do before ready(): when one ran, torch (and the
# libraries that load with it) was needed before ready().
_MODEL_WORK = frozenset({semconv.PHASE_DESERIALIZE, semconv.PHASE_ALLOCATE, semconv.PHASE_H2D, semconv.PHASE_CAST,
                         semconv.PHASE_COMPILE, semconv.PHASE_GRAPH_CAPTURE, semconv.PHASE_WARMUP,
                         semconv.PHASE_TF_FROM_PRETRAINED})
_SERVING_STACK = frozenset({"torch", "transformers", "safetensors", "vllm", "sglang", "accelerate", "tokenizers",
                            "triton", "numpy", "jax", "tensorflow", "diffusers"})
_CAUSE_SHARE = 0.3  # a cause this share of the import's time is its lever


def _needed_before_ready(breakdown: Breakdown, package: str) -> bool:
    """The start-up used ``package`` before ready(): a serving-stack library and the start-up
    loaded a model (a phase of model work ran), or a later span was made by that library."""
    if package not in _SERVING_STACK:
        return False
    return any(s.phase in _MODEL_WORK or (s.phase or "").startswith(package + ".") for s in breakdown.spans)


def _optional_example(breakdown: Breakdown, package: str) -> str:
    compiles = any(s.phase == semconv.PHASE_COMPILE for s in breakdown.spans)
    if package == "torch" and not compiles:
        return "torch._dynamo and torch._inductor when nothing compiles: no torch.compile, no meta-device init"
    return "what it imports only for features the server does not use"


def _import_cause(record, evidence: list[str]) -> str | None:
    """Compiling from source or reading from storage, when either is a large part of the import
    (issue 38): the lever that removes it, not "import it later"."""
    why = record.why
    if why is None or not record.ns:
        return None
    if why.cpu_ns is not None:
        evidence.append(f"import {record.module}: {format_seconds(why.cpu_ns)} on the CPU of "
                        f"{format_seconds(record.ns)}" + (f", read {format_bytes(why.storage_read_bytes)} from "
                                                          "storage" if why.storage_read_bytes else "")
                        + (f", {why.compiled_modules} modules compiled from source in "
                           f"{format_seconds(why.compile_ns)}" if why.compiled_modules else ""))
    if why.compile_ns >= _CAUSE_SHARE * record.ns:
        return (f"{format_seconds(why.compile_ns)} of it compiling {why.compiled_modules} modules from source (no "
                "cached bytecode): compile the bytecode at image build (see imports_from_source)")
    if why.storage_read_bytes and why.storage_off_cpu_ns >= _CAUSE_SHARE * record.ns:
        return (f"{format_seconds(why.storage_off_cpu_ns)} of it off the CPU reading "
                f"{format_bytes(why.storage_read_bytes)} from storage: pre-warm site-packages or keep it on local "
                "storage (see imports_from_storage)")
    return None


def _parent(breakdown: Breakdown, record):
    """The span an import ran under (a phase of the user's or a library step), if in the trace."""
    return next((s for s in breakdown.spans if s.span_id == record.parent_id), None)


def _during(parent) -> str:
    return f", during {parent.phase}" if parent is not None and parent.phase else ""


def plugin_import_ns(breakdown: Breakdown) -> int:
    """otel-coldstart's own import and set-up inside the ``import`` phase (``coldstart.import.own_s``)."""
    total = 0
    for span in breakdown.spans:
        own = span.attributes.get(semconv.IMPORT_OWN_S)
        if span.phase == semconv.PHASE_IMPORT and isinstance(own, (int, float)) and not isinstance(own, bool):
            if own == own and own > 0:  # NaN and negatives from a hostile trace count as nothing
                total += span.busy_ns if own * 1e9 >= span.busy_ns else int(own * 1e9)
    return total
