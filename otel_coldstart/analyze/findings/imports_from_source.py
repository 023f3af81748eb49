"""Imports compiled from source: no valid cached bytecode, so every start-up compiles the
modules it imports (an image built with ``pip install --no-compile``, ``.pyc`` files
stripped from a slim image, ``PYTHONDONTWRITEBYTECODE=1`` or a read-only ``__pycache__``
so nothing is ever cached). patches/imports.py counts the modules compiled and times the
compilation (importlib compiles only when it found no usable ``.pyc``).

Estimate: the ``bytecode`` lever's projection (analyze/whatif/bytecode.py, the figure
``whatif --lever bytecode`` gives): the compile time measured goes; reading a ``.pyc``
instead of the source costs about the same.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..explain import import_summary
from ..storage_floor import StorageFloor
from ..units import format_seconds
from ..whatif import BYTECODE
from ._finding import Finding, claim, share_text, weight
from ._levers import lever_saving

MIN_COMPILED = 20  # fewer modules compiled: a module edited since, a script: not an image without bytecode
MIN_COMPILE_NS = 20_000_000

LEVER = ("cache the bytecode in the image: `python -m compileall -q -j0 <site-packages>` at build time (or let pip "
         "compile, no --no-compile), and keep `__pycache__` writable, or set PYTHONPYCACHEPREFIX to a directory "
         "compiled at build time where site-packages is read-only")


def check(breakdown: Breakdown, floor: StorageFloor | None = None, given=None) -> list[Finding]:
    summary = import_summary(breakdown)
    why = summary.why if summary is not None else None
    if summary is None or why is None or why.compiled_modules < MIN_COMPILED or why.compile_ns < MIN_COMPILE_NS:
        return []
    total = breakdown.duration_ns
    evidence = [f"{why.compiled_modules} modules compiled from source in {format_seconds(why.compile_ns)} "
                f"({share_text(why.compile_ns, total)}), of {format_seconds(why.ns)} importing"]
    compiled = [(r.module, r.why) for r in summary.imports if r.why is not None and r.why.compiled_modules]
    if compiled:
        evidence.append("compiled by: " + "; ".join(
            f"import {module}: {causes.compiled_modules} modules, {format_seconds(causes.compile_ns)}"
            for module, causes in compiled[:3]))
    share = why.compile_ns / total if total else 0.0
    what = f"{why.compiled_modules} modules compiled from source (no cached bytecode): {format_seconds(why.compile_ns)}"
    title = f"{what}; the image ships no usable bytecode" if weight(share) != "minor" else what
    projected = lever_saving(breakdown, BYTECODE, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="imports_from_source", phase=semconv.PHASE_IMPORT, title=title, evidence=evidence,
        lever=LEVER, saving_ns=saving, share=share, estimate=projected.estimate,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_IMPORT))] if saving else [],
    )]
