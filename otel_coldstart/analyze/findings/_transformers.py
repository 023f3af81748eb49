"""What to say when a step of transformers' ``from_pretrained`` dominates (the
``transformers.*`` phases of patches/transformers.py): evidence from the steps' spans and
the lever that fits the step, for the dominant-phase finding. The user does not own this
code, so the lever is never "wrap it in finer phases": it is what a user can change around
the call (its arguments, the checkpoint, where the process starts from).
"""

from __future__ import annotations

from collections.abc import Sequence

from ... import semconv
from ..model import Span
from ..units import format_seconds

_PER_PROCESS = "fork model servers from a process that has done it once (a pre-forked worker pool)"

LEVERS = {
    semconv.PHASE_TF_FROM_PRETRAINED:
        "transformers' own work outside the named steps (config and generation config, the Hub's "
        "revision look-ups, adapter checks): load from a local directory, or set HF_HUB_OFFLINE=1 "
        "over a filled cache so no Hub round trip is made",
    semconv.PHASE_TF_IMPORT_MODEL_CODE:
        "the first from_pretrained of a process imports the model's code and, through it, most of "
        "transformers and torch's optional packages: overlap it with the I/O (import {module} on a "
        "thread while the weights download or the page cache warms), or " + _PER_PROCESS,
    semconv.PHASE_TF_WEIGHT_CONVERSIONS:
        "transformers 5 builds its checkpoint conversion rules (regular expressions over the "
        "registered model types) once per process: " + _PER_PROCESS + ", or load several models "
        "in one process",
    semconv.PHASE_TF_LOAD_WEIGHTS:
        "transformers' per-tensor work outside the reads and casts (renaming keys, converting, "
        "setting parameters): save the checkpoint with the model's own key names, layout and "
        "serving dtype, and load onto the target device with device_map",
    semconv.PHASE_TF_INIT_MISSING:
        "weights the checkpoint lacks (or whose shapes differ) are initialised at random during the "
        "load: save a complete checkpoint for the class you load, or load the class it was saved "
        "for (transformers' load report lists the missing keys)",
    semconv.PHASE_TF_TIE_WEIGHTS:
        "tying shares embedding and output weights and should take milliseconds: a slow one comes "
        "from many or pattern-matched tied keys in the model class (_tied_weights_keys)",
    semconv.PHASE_TF_DISPATCH:
        "accelerate spreads the model over several devices or offloads it and adds hooks: give each "
        "process one device (tensor parallelism, tp_plan) and keep weights off CPU/disk offload",
}

_BUILD_ON_META = ("the model is already built on the meta device (nothing allocated or initialised): "
                  "the time is its modules' Python __init__, growing with the layer count; look for "
                  "work done at construction (buffers computed eagerly, remote code), or " + _PER_PROCESS)
_BUILD_ALLOCATING = ("the model was built on a real device, so every parameter was allocated and "
                     "initialised before the checkpoint overwrote it: build on the meta device "
                     "(low_cpu_mem_usage=True or a device_map; DeepSpeed ZeRO-3's zero.Init allocates "
                     "by design)")


def explain(phase: str, spans: Sequence[Span]) -> tuple[list[str], str] | None:
    """(evidence, lever) for a dominant ``transformers.*`` phase; None for any other phase."""
    if phase not in semconv.TRANSFORMERS_PHASES:
        return None
    steps = [s for s in spans if s.phase == phase]
    evidence: list[str] = []
    if phase == semconv.PHASE_TF_BUILD_MODEL:
        meta = {s.attributes.get(semconv.TF_META_INIT) for s in steps}
        lever = _BUILD_ALLOCATING if False in meta else _BUILD_ON_META if True in meta else \
            f"{_BUILD_ALLOCATING}; or, if it was on the meta device already: {_BUILD_ON_META}"
        classes = _strings(steps, semconv.TF_MODEL_CLASS) or _strings(spans, semconv.TF_MODEL_CLASS)
        if classes:
            evidence.append("model: " + ", ".join(classes))
        return evidence, lever
    lever = LEVERS[phase]
    if phase == semconv.PHASE_TF_IMPORT_MODEL_CODE:
        for step in sorted(steps, key=lambda s: -s.duration_ns)[:3]:
            module = step.attributes.get(semconv.TF_MODEL_MODULE)
            count = step.attributes.get(semconv.TF_MODULES_IMPORTED)
            what = f"{module}" if isinstance(module, str) else "the model's module"
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                what += f" and {count:,} modules with it"
            evidence.append(f"imported {what} in {format_seconds(step.duration_ns)}")
        modules = _strings(steps, semconv.TF_MODEL_MODULE)
        lever = lever.format(module=modules[0] if len(modules) == 1 else "the model's module")
    return evidence, lever


def _strings(spans: Sequence[Span], key: str) -> list[str]:
    return sorted({v for s in spans if isinstance(v := s.attributes.get(key), str)})
