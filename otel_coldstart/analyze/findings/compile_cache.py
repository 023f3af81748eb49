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

from typing import Sequence

from ... import semconv
from ..breakdown import Breakdown
from ..explain import compile_summary, fastest_hits
from ..units import format_seconds
from ..whatif import COMPILE_CACHE
from ._finding import Finding, claim, share_text, weight
from ._levers import gathered, lever_saving

CACHE_NAMES = {"fx_graph": "Inductor FX graph cache", "aot_autograd": "AOTAutograd cache",
               "dynamo": "precompile (Dynamo) cache"}
STAGE_NAMES = {"dynamo": "Dynamo (whole frame)", "aot_autograd": "AOTAutograd", "inductor": "Inductor",
               "codegen": "code generation", "kernel_compile": "kernel compilation", "autotune": "autotuning"}


def check(results: Sequence[Breakdown], given=None) -> list[Finding]:
    summaries = {id(b): compile_summary(b) for b in results}
    references = fastest_hits([s for s in summaries.values() if s is not None])
    given = given if given is not None else gathered(results)  # the lever learns from them all
    found = []
    for b in results:
        summary = summaries[id(b)]
        if summary is None or not summary.missed:
            continue
        found.append(_finding(b, summary, references, given))
    return found


def _finding(b: Breakdown, summary, references, given=None) -> Finding:
    missed = summary.missed
    total = b.duration_ns
    spent = sum(c.ns for c in missed)
    share = spent / total if total else 0.0
    evidence = [f"{len(missed)} of {summary.count} compilation(s) missed a cache: {format_seconds(spent)}, "
                f"{share_text(spent, total)}"]
    per_cache: dict[str, list[int]] = {}
    for c in missed:
        for cache, (hits, misses) in c.caches.items():
            counts = per_cache.setdefault(cache, [0, 0])
            counts[0] += hits
            counts[1] += misses
    if per_cache:
        evidence.append("; ".join(f"{CACHE_NAMES.get(cache, cache)}: {misses} miss(es), {hits} hit(s)"
                                  for cache, (hits, misses) in sorted(per_cache.items(), key=lambda kv: -kv[1][1])))
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
        reference = references.get(c.frame) if c.frame else None
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
