"""Runtime initialisation dominating a small model: the CUDA context, cuBLAS/cuDNN
handles and module loading cost the same whatever the model size, so for small models
they are most of the start-up.

Estimate: none. No ``whatif`` lever projects a pre-initialised pool or lazy module loading
(the trace holds no start-up without the initialisation to learn it from), and every saving a
finding states is a lever's projection (issue 39): the finding names where the time goes.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..units import format_bytes, format_seconds
from ._finding import Finding

MIN_SHARE = 0.3
SMALL_MODEL_BYTES = 2 << 30


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    init = breakdown.phase(semconv.PHASE_RUNTIME_INIT)
    total = breakdown.duration_ns
    weights = sum(s.size or 0 for s in breakdown.read_shards)
    if init is None or total <= 0 or init.share_of(total) < MIN_SHARE or weights > SMALL_MODEL_BYTES:
        return []
    return [Finding.about(
        breakdown, rule="runtime_init", phase=semconv.PHASE_RUNTIME_INIT,
        title=f"runtime init is {init.share_of(total) * 100:.0f}% of the start-up of a small model",
        evidence=[f"runtime_init {format_seconds(init.busy_ns)} of {format_seconds(total)}",
                  f"checkpoint {format_bytes(weights)}: loading it is not where the time goes"],
        lever="keep a warm, pre-initialised process pool; set CUDA_MODULE_LOADING=LAZY; expose only the "
              "devices used (CUDA_VISIBLE_DEVICES); or restore a checkpointed process",
        saving_ns=0, share=init.share_of(total),
        estimate="not estimated: no whatif lever projects the runtime initialisation (no start-up without it "
                 "in the trace to learn from)",
    )]
