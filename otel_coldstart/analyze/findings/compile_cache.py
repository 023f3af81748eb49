"""torch.compile missed its caches: compilations that a persisted cache would have served
(``coldstart.compile.cache.misses`` > 0 on their spans; patches/compile.py reads torch's
counters). No finding when every compilation hit, nor when the trace cannot tell.

Estimate: the ``compile-cache`` lever's projection (analyze/whatif/compile_cache.py, the same
figure ``whatif --lever compile-cache`` gives): for each missed compilation, its own time
minus that of the fastest compilation of the same graph (``coldstart.compile.frame``) that a
cache served, in any start-up given to the command (``analyze cold.jsonl warm.jsonl``).
Without one, "not estimated": a cache hit still costs Dynamo's tracing and the cache's
loading, which the trace does not hold.

A rule over all the start-ups given, not one: the reference may be another start-up.
"""

from __future__ import annotations

from collections.abc import Sequence

from ... import semconv
from ..breakdown import Breakdown
from ..explain import compile_summary
from ..units import format_seconds
from ..whatif import COMPILE_CACHE
from ._finding import Finding, claim, share_text, weight
from ._levers import gathered, lever_saving

CACHE_NAMES = {"fx_graph": "Inductor FX graph cache", "aot_autograd": "AOTAutograd cache",
               "dynamo": "precompile (Dynamo) cache"}
STAGE_NAMES = {"dynamo": "Dynamo (whole frame)", "aot_autograd": "AOTAutograd", "inductor": "Inductor",
               "codegen": "code generation", "kernel_compile": "kernel compilation", "autotune": "autotuning"}


def check(results: Sequence[Breakdown], given=None) -> list[Finding]:
    given = given if given is not None else gathered(results)  # the lever learns from them all
    found = []
    for b in results:
        summary = compile_summary(b)
        if summary is None or not summary.missed:
            continue
        found.append(_finding(b, summary, given))
    return found


def _finding(b: Breakdown, summary, given) -> Finding:
    missed = summary.missed
    total = b.duration_ns
    spent = sum(c.ns for c in missed)
    share = spent / total if total else 0.0
    bypassed = " or bypassed" if any(any(c.bypasses.values()) for c in missed) else ""
    evidence = [f"{len(missed)} of {summary.count} compilation(s) missed{bypassed} a cache: {format_seconds(spent)}, "
                f"{share_text(spent, total)}"]
    per_cache: dict[str, list[int]] = {}
    for c in missed:
        for cache, (hits, misses) in c.caches.items():
            counts = per_cache.setdefault(cache, [0, 0, 0])
            counts[0] += hits
            counts[1] += misses
            counts[2] += c.bypasses.get(cache, 0)
    if per_cache:
        evidence.append("; ".join(
            f"{CACHE_NAMES.get(cache, cache)}: {misses} miss(es), {hits} hit(s)"
            + (f", {bypassed} bypass(es)" if bypassed else "")
            for cache, (hits, misses, bypassed) in sorted(per_cache.items(), key=lambda kv: -kv[1][1] - kv[1][2])))
    stages: dict[str, float] = {}
    for c in missed:
        for stage, seconds in c.stages.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    if stages:
        evidence.append("in torch's stages (cumulative, nested): " + ", ".join(
            f"{STAGE_NAMES.get(stage, stage)} {format_seconds(int(stages[stage] * 1e9))}"
            for stage in semconv.COMPILE_STAGES if stage in stages))
    estimated = []
    for c in missed:
        reference = given.compile_hits.get(c.frame) if c.frame else None  # the lever's own evidence
        if reference is not None:
            estimated.append((c, reference))
    projected = lever_saving(b, COMPILE_CACHE, None, given)
    saving = projected.ns or 0
    for c, reference in estimated[:3]:
        evidence.append(f"{c.frame}: {format_seconds(c.ns)} missed; served by a cache in trace "
                        f"{reference.trace_id[:16]}: {format_seconds(reference.ns)}")
    dirs = summary.cache_dirs
    if dirs:
        evidence.append("cache directory: " + ", ".join(dirs[:2]))
    if estimated:
        estimate = projected.estimate
    else:
        estimate = ("not estimated: no compilation of the same graph was served by a cache in the start-ups "
                    "given (analyze a warm start-up with it to estimate)")
    where = f" (now {dirs[0]})" if dirs else ""
    lever = ("persist the compile caches across pods: put TORCHINDUCTOR_CACHE_DIR" + where + " on a volume that "
             "outlives the pod (a shared volume, or bake a warmed cache into the image), or save them with "
             "torch.compiler.save_cache_artifacts() after a warm start and load them with "
             "torch.compiler.load_cache_artifacts() before the first compilation; for vLLM, keep its compile "
             "cache directory (VLLM_CACHE_ROOT, default ~/.cache/vllm, torch_compile_cache) there too")
    why = _why_it_cannot_hit(missed, evidence, where)
    lever = _bypassed(missed, evidence, where) or why or lever
    level = weight(share)
    if level == "major":
        title = f"torch.compile missed its caches: {format_seconds(spent)}, {share_text(spent, total)}"
    else:
        title = f"{len(missed)} compilation(s) missed the compile caches: {format_seconds(spent)}, " \
                f"{share_text(spent, total)}"
    return Finding.about(
        b, rule="compile_cache", phase=semconv.PHASE_COMPILE, title=title, evidence=evidence, lever=lever,
        saving_ns=saving, share=share, estimate=estimate,
        claims=[claim(b, saving, ("phase", semconv.PHASE_COMPILE))] if saving else [],
    )


GRAD_LEVER = ("call the compiled module under torch.inference_mode() (or torch.no_grad(), or with its parameters' "
              "requires_grad off) when serving: torch then compiles an inference graph and writes its AOTAutograd "
              "entry, which the next start-up hits")


def _why_it_cannot_hit(missed, evidence: list[str], where: str) -> str | None:
    """A miss that persisting the cache does not cure (issue 39): the cache directory already
    held entries at the start (it is persisted), or torch wrote no entry to persist. Returns
    the lever that works, with the reason in the evidence; None where the trace does not tell
    (a plugin before issue 39) or the directory was simply empty."""
    known = [c for c in missed if c.entries_at_start]
    if not known:
        return None
    held = {cache: max(c.entries_at_start.get(cache, 0) for c in known) for cache in ("fx_graph", "aot_autograd")}
    filled = any(held.values())
    aot_missed = any(c.caches.get("aot_autograd", (0, 0))[1] for c in missed)
    grad = [c for c in missed if c.grad_enabled]
    aot_saved = sum(c.saved.get("aot_autograd", 0) for c in missed)
    unsaved_training_graph = aot_missed and grad and aot_saved == 0 and \
        all("aot_autograd" in c.saved for c in grad)
    if filled:
        evidence.append(f"the cache directory{where} already held entries at the start (FX graph: "
                        f"{_count(held['fx_graph'])}, AOTAutograd: {_count(held['aot_autograd'])}): the cache is "
                        "persisted, yet the compilation missed")
    if unsaved_training_graph:
        evidence.append(f"{len(grad)} compilation(s) ran with grad enabled (not under inference_mode()/no_grad()): "
                        "torch compiled a training graph and wrote no AOTAutograd entry (it writes one only once "
                        "the backward is compiled, which serving never does), so every start-up misses again")
        if filled:
            return f"{GRAD_LEVER}; the cache directory{where} is already kept, persisting it more will not help"
        return f"{GRAD_LEVER}, and persist the compile caches (TORCHINDUCTOR_CACHE_DIR{where} on a volume that " \
               "outlives the pod): persisted alone, this cache would miss every time"
    if filled:
        return (f"the cache directory{where} is already kept: find what changes the cache key between start-ups "
                "(torch version, torch.compile options and config, the inputs' shapes and dtypes, the model's "
                "code); TORCH_LOGS=+inductor prints the keys of two start-ups to compare")
    return None


# What to do about a reason torch gives for bypassing its cache (its words, matched loosely).
BYPASS_LEVERS = (
    ("custom pass", "give each custom pass a cache key: make it a torch._inductor.custom_graph_pass.CustomGraphPass "
                    "whose uuid() names its code, which torch then includes in the cache key"),
    ("freezing", "torch does not cache graphs compiled with freezing (torch._inductor.config.freezing): weigh "
                 "freezing's run-time gain against compiling from scratch at every start-up"),
    ("frozen", "torch does not cache graphs compiled with freezing (torch._inductor.config.freezing): weigh "
               "freezing's run-time gain against compiling from scratch at every start-up"),
    ("not enabled", "turn the FX graph cache back on (TORCHINDUCTOR_FX_GRAPH_CACHE=1 or "
                    "torch._inductor.config.fx_graph_cache = True)"),
)


def _bypassed(missed, evidence: list[str], where: str) -> str | None:
    """Compilations torch would not cache, with its reasons (patches/compile.py records them):
    the evidence quotes torch; the lever is what lifts the reason, since persisting the cache
    directory cannot help a graph torch never writes. None where torch gave no reason."""
    reasons: dict[str, list[str]] = {}
    for c in missed:
        for cache, text in c.bypass_reasons.items():
            for reason in text.split("; "):
                if reason and reason not in reasons.setdefault(cache, []):
                    reasons[cache].append(reason)
    if not reasons:
        return None
    evidence.append("torch bypassed its cache, in its words: " + "; ".join(
        f"{CACHE_NAMES.get(cache, cache)}: \"{reason}\"" for cache, found in reasons.items() for reason in found))
    said = [reason for found in reasons.values() for reason in found]
    # The reason a lever lifts first ("freezing" before the "mkldnn tensors unpickleable" it causes).
    said.sort(key=lambda reason: not any(key in reason.lower() for key, _ in BYPASS_LEVERS))
    levers = list(dict.fromkeys(lever for reason in said for key, lever in BYPASS_LEVERS if key in reason.lower()))
    if not levers:
        levers = ["remove what torch names, or compile ahead of time (torch.export with AOTInductor) so that no "
                  "start-up compiles"]
    return (f"torch will not cache this graph (\"{said[0]}\"), so persisting the cache directory{where} cannot help: "
            + "; ".join(levers))


def _count(entries: int) -> str:
    return f"{entries}+" if entries >= semconv.COMPILE_CACHE_ENTRIES_COUNTED else str(entries)
