"""How the explanations of the big phases read (analyze/explain.py): their part of the JSON
document, and their lines in the text and Markdown reports. Writes, never computes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from .breakdown import Breakdown
from .escape import html_text as e, markdown_text, terminal_text as _t
from .explain import capture_summary, compile_summary, import_summary
from .labels import shorten
from .units import format_bytes, format_seconds, json_seconds as _s

# --- JSON -------------------------------------------------------------------------------------


def explain_document(b: Breakdown) -> dict:
    """``startups[i].imports``, ``.compile``, ``.captures`` and ``.outline`` (docs/cli.md):
    None when the start-up has none of them."""
    return {"imports": _imports_doc(b), "compile": _compile_doc(b), "captures": _captures_doc(b),
            "outline": _outline_doc(b)}


def _outline_doc(b: Breakdown) -> list | None:
    if not b.outline:
        return None
    origin = b.root.start_ns
    return [{"name": n.name, "kind": n.kind, "depth": n.depth, "process": n.process,
             "offset_s": _s(n.start_ns - origin), "duration_s": _s(n.duration_ns), "own_s": _s(n.own_ns),
             "phases": {phase: _s(ns) for phase, ns in n.phases}}
            for n in b.outline]


def _imports_doc(b: Breakdown) -> dict | None:
    summary = import_summary(b)
    if summary is None:
        return None
    return {
        "seconds": _s(summary.ns),
        "batched_s": _s(summary.batched_ns),
        "batched_imports": summary.batched_calls,
        **_causes_doc(summary.why),
        "slow": [{"module": i.module, "seconds": _s(i.ns),
                  "self_s": _s(i.self_ns) if i.self_ns is not None else None,
                  "modules": i.modules, "failed": i.failed, "interrupted": i.interrupted,
                  "importer": i.importer, **_causes_doc(i.why),
                  "heaviest": [{"module": m, "self_s": _s(ns)} for m, ns in i.heaviest],
                  "packages": [{"package": p, "self_s": _s(ns)} for p, ns in i.packages]}
                 for i in summary.imports],
    }


def _causes_doc(why) -> dict:
    """Why imports were slow (issue 38): None for each figure a trace from before does not hold."""
    if why is None:
        return {"compiled_modules": None, "compile_seconds": None, "storage_read_bytes": None,
                "cpu_seconds": None, "off_cpu_seconds": None, "runqueue_seconds": None}
    return {"compiled_modules": why.compiled_modules, "compile_seconds": _s(why.compile_ns),
            "storage_read_bytes": why.storage_read_bytes,
            "cpu_seconds": _s(why.cpu_ns) if why.cpu_ns is not None else None,
            "off_cpu_seconds": _s(why.off_cpu_ns) if why.cpu_ns is not None else None,
            "runqueue_seconds": _s(why.queued_ns) if why.queued_ns is not None else None}


def _compile_doc(b: Breakdown) -> dict | None:
    summary = compile_summary(b)
    if summary is None:
        return None
    return {
        "compilations": summary.count,
        "seconds": _s(summary.ns),
        "cache_hits": summary.cache_hits,  # None: the trace does not tell
        "cache_misses": summary.cache_misses,
        "unknown": summary.unknown,
        "recompilations": summary.recompilations,
        "stages": {stage: round(seconds, 6) for stage, seconds in summary.stages.items()},
        "cache_dirs": list(summary.cache_dirs),
        "items": [{"compile_id": c.compile_id, "frame": c.frame, "seconds": _s(c.ns), "cache_hits": c.hits,
                   "cache_misses": c.misses,
                   "caches": {cache: {"hits": h, "misses": m} for cache, (h, m) in c.caches.items()},
                   "stages": dict(c.stages), "recompile": c.recompile, "recompile_reason": c.reason,
                   "failure": c.failure}
                  for c in summary.compilations],
    }


def _captures_doc(b: Breakdown) -> dict | None:
    summary = capture_summary(b)
    if summary is None:
        return None
    return {"count": summary.count, "seconds": _s(summary.ns),
            "sizes": [{"batch_size": size, "seconds": _s(ns)} for size, ns in summary.sizes]}


# --- text and Markdown --------------------------------------------------------------------------


def _causes_text(why) -> str:
    """Why the imports took their time (issue 38): CPU, compiling from source, storage reads."""
    if why is None or why.cpu_ns is None:
        return ""
    parts = [f"{format_seconds(why.cpu_ns)} on the CPU of {format_seconds(why.ns)}"]
    if why.compiled_modules:
        parts.append(f"{why.compiled_modules} modules compiled from source in {format_seconds(why.compile_ns)}")
    if why.storage_read_bytes:
        parts.append(f"{format_bytes(why.storage_read_bytes)} read from storage")
    return " (" + ", ".join(parts) + ")"


def explain_lines(b: Breakdown) -> list[str]:
    """One line each for the imports, compilations and captures that explain the phases."""
    lines = []
    imports = import_summary(b)
    if imports is not None and imports.imports:
        parts = []
        for record in imports.imports[:3]:
            inside = ", ".join(f"{p} {format_seconds(ns)}" for p, ns in record.packages[:3])
            parts.append(f"{record.module} {format_seconds(record.ns)}" + (f" ({inside})" if inside else ""))
        more = f"; {imports.batched_calls} fast import(s) {format_seconds(imports.batched_ns)}" \
            if imports.batched_calls else ""
        lines.append("imports: " + "; ".join(parts) + more + _causes_text(imports.why))
    compiled = compile_summary(b)
    if compiled is not None:
        if compiled.cache_misses is None:
            cache = "cache outcome unknown"
        else:
            cache = f"{compiled.cache_hits or 0} cache hit(s), {compiled.cache_misses} miss(es)"
            if compiled.unknown:
                cache += f", {compiled.unknown} unknown"
        stages = ", ".join(f"{stage} {format_seconds(int(seconds * 1e9))}"
                           for stage, seconds in compiled.stages.items())
        recompiles = f", {compiled.recompilations} recompilation(s)" if compiled.recompilations else ""
        lines.append(f"compile: {compiled.count} compilation(s) {format_seconds(compiled.ns)}, {cache}{recompiles}"
                     + (f"; torch's stages: {stages}" if stages else ""))
    captures = capture_summary(b)
    if captures is not None:
        slowest = ", ".join(f"{size} {format_seconds(ns)}" for size, ns in captures.slowest(5))
        lines.append(f"graph captures: {captures.count} in {format_seconds(captures.ns)}"
                     + (f"; slowest sizes: {slowest}" if slowest else ""))
    return lines


OUTLINE_ROWS = 40  # the outline in a report: its first rows (the JSON has them all)


def outline_rows(b: Breakdown) -> list[tuple[str, str, str, str]]:
    """(indented name, duration, process, what is inside) per outline node, in tree order."""
    rows = []
    for n in b.outline[:OUTLINE_ROWS]:
        inside = ", ".join(f"{phase} {format_seconds(ns)}" for phase, ns in n.phases[:4])
        if n.own_ns and n.kind == "server":
            inside = (inside + "; " if inside else "") + f"own {format_seconds(n.own_ns)}"
        rows.append(("  " * n.depth + n.name, format_seconds(n.duration_ns), n.process or "-", inside))
    return rows


def render_explain_text(b: Breakdown, out: TextIO) -> None:
    if b.outline:
        processes = len({n.process for n in b.outline if n.process})
        out.write(f"  outline (the server's start-up spans, our phases inside; {processes} process(es)):\n")
        rows = outline_rows(b)
        width = min(48, max(len(_t(name)) for name, *_ in rows) + 2)
        for name, duration, process, inside in rows:
            out.write(f"    {shorten(_t(name), width - 2):<{width}}{duration:>10}  {shorten(_t(process), 14):<14}"
                      f"  {_t(inside)}\n")
        if len(b.outline) > OUTLINE_ROWS:
            out.write(f"    ... {len(b.outline) - OUTLINE_ROWS} more (--format json has them all)\n")
    for line in explain_lines(b):
        out.write(f"  {_t(line)}\n")


def render_explain_markdown(b: Breakdown, out: TextIO) -> None:
    if b.outline:
        out.write("| outline (server spans, our phases inside) | time | process | inside |\n|---|---:|---|---|\n")
        for name, duration, process, inside in outline_rows(b):
            indent = "&nbsp;" * (2 * (len(name) - len(name.lstrip(" "))))
            out.write(f"| {indent}{markdown_text(name.strip())} | {duration} | {markdown_text(process)} | "
                      f"{markdown_text(inside)} |\n")
        out.write("\n")
    lines = explain_lines(b)
    for line in lines:
        out.write(f"- {markdown_text(line)}\n")
    if lines:
        out.write("\n")


def render_explain_html(b: Breakdown, w: Callable[[str], object]) -> None:
    """The same outline and lines in the HTML page (render_html), everything escaped."""
    if b.outline:
        w("<h3>Outline</h3>\n<p class=\"muted\">The server's own start-up spans, our phases inside.</p>\n"
          "<table class=\"data outline\"><thead><tr><th>span</th><th class=\"num\">time</th><th>process</th>"
          "<th>inside</th></tr></thead><tbody>\n")
        for name, duration, process, inside in outline_rows(b):
            depth = len(name) - len(name.lstrip(" "))
            w(f"<tr><td style=\"padding-left:{depth}ch\">{e(name.strip())}</td><td class=\"num\">{e(duration)}</td>"
              f"<td>{e(process)}</td><td>{e(inside)}</td></tr>\n")
        w("</tbody></table>\n")
    lines = explain_lines(b)
    if lines:
        w("<h3>Why those phases took long</h3>\n<ul class=\"explain\">"
          + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>\n")
