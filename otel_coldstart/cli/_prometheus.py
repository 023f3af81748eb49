"""``capacity --prometheus URL``: p50/p95 of the start-up and of each phase from the
histograms the plugin exports (``model_startup_duration_seconds``,
``model_startup_phase_duration_seconds``; docs/metrics.md), the autoscaler lead time and the
warm pool, as the file path gives them, each figure with its bucket: a quantile from buckets
is an interval (analyze/histogram.py).

Each process records its start-up once, and its series keep their value while it lives, so
the start-ups of a range are ``max_over_time`` of each series over it, summed (as the shipped
dashboards do); ``increase`` would miss a series' first value. A process restarted under the
same labels (same scrape instance) within the range counts once. The phase histogram has no
``ready`` label: its start-ups include those that did not reach ready()."""

from __future__ import annotations

import argparse
import json
import math
import urllib.parse

from .. import semconv, verdicts
from ..analyze.histogram import BucketQuantile, bucket_quantile
from ..analyze.units import format_seconds
from ._inputs import MAX_TIMEOUT_S, check_number, output
from .errors import EXIT_NO_STARTUP, EXIT_SOURCE_UNAVAILABLE, EXIT_USAGE, CliError

STARTUP = "model_startup_duration_seconds_bucket"
PHASE = "model_startup_phase_duration_seconds_bucket"
# A native (exponential) histogram is one series under the bare name, its buckets inside each sample.
NATIVE_STARTUP = "model_startup_duration_seconds"
LABEL_ALIASES = {"instance_type": "host_type", "host.type": "host_type"}


def add_prometheus_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Prometheus (the plugin's start-up histograms; docs/fleet.md)")
    group.add_argument("--prometheus", metavar="URL",
                       help="read the start-up histograms from Prometheus, e.g. http://prometheus:9090 (with "
                            "--since, --by LABEL, --service)")


def _label(name: str) -> str:
    name = LABEL_ALIASES.get(name, name)
    label = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    if not label or label[0].isdigit():
        raise CliError(f"--by {name!r}: not a label name", EXIT_USAGE)
    return label


def _string(value: str) -> str:
    """A PromQL string literal: the value is data, never query text."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _range(args: argparse.Namespace) -> str:
    from ._clickhouse import DEFAULT_SINCE, _since_ns

    if args.time_from or args.time_to or args.where:
        raise CliError("--prometheus takes --since (a range up to now), not --from/--to/--where", EXIT_USAGE)
    seconds = _since_ns(args.since or DEFAULT_SINCE) // 10**9
    if seconds < 1:
        raise CliError("--since must be at least 1s", EXIT_USAGE)
    return f"{seconds}s"


def _vector(base: str, expr: str, timeout: float) -> list[dict]:
    from ..sources.live import LiveSourceError, fetch_json

    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        answer = fetch_json(url, timeout)
    except LiveSourceError as exc:
        raise CliError(str(exc), EXIT_SOURCE_UNAVAILABLE) from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise CliError(f"the Prometheus query failed: {error or 'no success status'}", EXIT_SOURCE_UNAVAILABLE)
    result = answer.get("data", {}).get("result")
    if not isinstance(result, list):
        raise CliError("the Prometheus answer has no result vector", EXIT_SOURCE_UNAVAILABLE)
    return result


def _native_series(base: str, selected: str, timeout: float) -> float:
    """How many series of the range hold the start-up histogram as a native histogram (the
    bare name, no ``_bucket``): asked only when no classic bucket was found, to say why."""
    rows = _vector(base, f"count(count_over_time({selected}))", timeout)
    try:
        return float(rows[0]["value"][1]) if rows else 0.0
    except (KeyError, ValueError, TypeError, IndexError):
        return 0.0


def _buckets(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[tuple[float, float]]]:
    out: dict[tuple, list[tuple[float, float]]] = {}
    for row in rows:
        metric = row.get("metric", {})
        try:
            le = float(metric["le"])
            count = float(row["value"][1])
        except (KeyError, ValueError, TypeError, IndexError):
            continue
        out.setdefault(tuple(metric.get(k, "") for k in keys), []).append((le, count))
    return out


def run_prometheus(args: argparse.Namespace, provisioning_ns: int) -> int:
    check_number(args.timeout, "--timeout", MAX_TIMEOUT_S)
    if args.format not in ("text", "json"):
        raise CliError("--prometheus writes text or json", EXIT_USAGE)
    window = _range(args)
    by = [_label(name) for name in (args.by or ["host.type"])]
    matchers = [f"service_name={_string(args.service)}"] if getattr(args, "service", None) else []
    ready = [] if args.include_unready else [f"{semconv.READY.replace('.', '_')}=\"true\""]

    def select(metric: str, extra: list[str]) -> str:
        return f"{metric}{{{', '.join(extra + matchers)}}}[{window}]"

    groups = [("", ())] + [(label, (label,)) for label in by]
    report = []
    for label, keys in groups:
        grouping = ", ".join(("le",) + keys)
        totals = _buckets(_vector(args.prometheus, f"sum by ({grouping}) (max_over_time({select(STARTUP, ready)}))",
                                  args.timeout), keys)
        phase_key = semconv.PHASE.replace(".", "_")
        phases = _buckets(_vector(args.prometheus, f"sum by ({grouping}, {phase_key}) (max_over_time("
                                  f"{select(PHASE, [])}))", args.timeout), keys + (phase_key,))
        for value, buckets in sorted(totals.items()):
            counted = max(count for le, count in buckets if math.isinf(le)) if buckets else 0
            if counted <= 0:
                continue
            total = (bucket_quantile(0.5, buckets), bucket_quantile(0.95, buckets))
            per_phase = {}
            for (*group_value, phase), phase_buckets in phases.items():
                if tuple(group_value) != value:
                    continue
                seen = max((count for le, count in phase_buckets if math.isinf(le)), default=0)
                zeros = max(0.0, counted - seen)  # start-ups without the phase: 0, as the file path counts them
                per_phase[phase] = (bucket_quantile(0.5, phase_buckets, zeros),
                                    bucket_quantile(0.95, phase_buckets, zeros))
            report.append(_group(label, value, counted, total, per_phase, provisioning_ns, args.ramp))
    if not report:
        which = " with coldstart_ready=true" if ready else ""
        native = _native_series(args.prometheus, select(NATIVE_STARTUP, ready), args.timeout)
        if native:
            raise CliError(f"{args.prometheus}: the start-ups of the last {window} are native histograms ({native:g} "
                           f"{NATIVE_STARTUP} series{which}, no {STARTUP} series): read only as classic "
                           "(le) buckets, because Prometheus 2.42's max_over_time/last_over_time return 0 for a "
                           "native histogram, so a range's start-ups cannot be summed from them (docs/decisions.md, "
                           "native histograms); export explicit-bucket histograms, the plugin's default",
                           EXIT_NO_STARTUP)
        raise CliError(f"{args.prometheus}: no start-up in the last {window} (no {STARTUP} series{which})",
                       EXIT_NO_STARTUP)
    with output(args.output) as out:
        if args.format == "json":
            json.dump({"schema": "otel-coldstart.capacity-prometheus/1", "range": window,
                       "provisioning_s": provisioning_ns / 1e9, "include_unready": args.include_unready,
                       "groups": [{k: v for k, v in g.items() if not k.startswith("_")} for g in report]},
                      out, indent=2)
            out.write("\n")
        else:
            _text(report, out, window)
    return 0


def _figure(q: BucketQuantile | None) -> dict | None:
    if q is None:
        return None
    return {"s": q.value_s, "bucket_s": [q.lower_s, None if math.isinf(q.upper_s) else q.upper_s]}


class _Median:
    def __init__(self, phase: str, busy_ns: int) -> None:
        self.phase, self.busy_ns = phase, busy_ns


def _group(label, value, counted, total, phases, provisioning_ns, ramp) -> dict:
    p50, p95 = total
    dominant = verdicts.dominant_phase((_Median(name, int(q[0].value_s * 1e9)) for name, q in phases.items() if q[0]),
                                       int(p50.value_s * 1e9))
    lead = provisioning_ns / 1e9 + p95.value_s
    lead_upper = provisioning_ns / 1e9 + p95.upper_s
    doc = {"attribute": label or None, "value": value[0] if value else "all", "startups": counted,
           "total": {"p50": _figure(p50), "p95": _figure(p95)},
           "phases": {name: {"p50": _figure(q[0]), "p95": _figure(q[1])} for name, q in sorted(phases.items())},
           "dominant_phase": dominant.phase if dominant else None,
           "lead_time_s": lead, "lead_time_bucket_upper_s": None if math.isinf(lead_upper) else lead_upper,
           "_p50": p50, "_p95": p95, "_phases": phases}
    if ramp is not None:
        doc["warm_pool"] = {"replicas": math.ceil(round(ramp * lead / 60, 9)),
                            "replicas_at_bucket_upper": None if math.isinf(lead_upper) else
                            math.ceil(round(ramp * lead_upper / 60, 9))}
    return doc


def _text(report: list[dict], out, window: str) -> None:
    out.write(f"from Prometheus histograms over the last {window}: each figure is histogram_quantile's estimate and "
              "the bucket it lies in (the true quantile is somewhere in that bucket)\n")
    for g in report:
        title = "all start-ups" if not g["attribute"] else f"{g['attribute']}={g['value']}"
        out.write(f"{title}: n={g['startups']:g} start-up(s); total p50 {g['_p50'].describe()}, "
                  f"p95 {g['_p95'].describe()}\n")
        out.write(f"    dominant phase: {g['dominant_phase'] or 'none (no phase holds 20% of the p50 start-up)'}\n")
        for name, (p50, p95) in sorted(g["_phases"].items(), key=lambda kv: -(kv[1][1].value_s if kv[1][1] else 0)):
            out.write(f"    {name:<18} p50 {p50.describe() if p50 else '-':<32} p95 {p95.describe() if p95 else '-'}\n")
        upper = g["lead_time_bucket_upper_s"]
        out.write(f"    autoscaler lead time: {format_seconds(int(g['lead_time_s'] * 1e9))} (provisioning + p95 start-up; "
                  f"{format_seconds(int(upper * 1e9)) if upper is not None else '+Inf'} at the top of its bucket)\n")
        if "warm_pool" in g:
            pool = g["warm_pool"]
            out.write(f"    warm pool: {pool['replicas']} replica(s) ({pool['replicas_at_bucket_upper']} at the top of "
                      "the p95's bucket)\n")

