"""Generates the Grafana dashboards in this folder from code (grafana-foundation-sdk).

    python dashboards/generate.py           # rewrite the committed JSON
    python dashboards/generate.py --check   # exit 1 if the committed JSON is out of date

Why queries look the way they do (docs/metrics.md has the long form):

- Each process records one start-up, so each series appears once, when its start-up ends,
  and then keeps its value. ``rate()``/``increase()`` never see a series' first value
  (Prometheus assumes nothing before the first sample), so panels take the latest value
  of every series seen in the window (``max_over_time(...[window])``) and aggregate
  those: "the start-ups of the processes that reported in this window".
- Every query carries the same filters (model, instance type, version), all template
  variables whose "All" value is ``.*`` (which also matches a label that is not set).
- The "Start-ups in flight" row is the exception: its gauges exist only while a start-up
  runs and vanish at ready(), so it reads their current values (no window): a start-up
  that finished or died drops out of it within one scrape (Prometheus marks it stale).
- No data source uid is written anywhere: panels use the ``${datasource}`` variable
  (Prometheus) and trace links use ``${traces}`` (Jaeger; exemplars can point anywhere).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from urllib.parse import quote

from grafana_foundation_sdk.builders import (
    common as common_builders,
    dashboard as db,
    prometheus,
    stat,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "model-startup.json")
UID = "otel-coldstart-startup"

PROMETHEUS = DataSourceRef(type_val="prometheus", uid="${datasource}")
TRACES_VARIABLE = "traces"

# Prometheus names of what otel_coldstart.metrics emits (docs/metrics.md).
DURATION = "model_startup_duration_seconds"
PHASE = "model_startup_phase_duration_seconds"
SHARD = "model_startup_shard_duration_seconds"
BYTES = "model_startup_bytes_total"
COPY_BYTES = "model_startup_copy_bytes_total"
COPY_THROUGHPUT = "model_startup_copy_throughput_bytes_per_second"
GRAPH_CAPTURES = "model_startup_graph_captures_total"
GRAPH_CAPTURE_TIME = "model_startup_graph_capture_time_seconds_total"
LAZY_UNREAD = "model_startup_lazy_unread_bytes_total"
FIRST_USE = "model_startup_first_use_bytes_total"
# Model delivery (issue 37): what the start-up fetched from the hub or S3 before reading it.
DOWNLOAD_BYTES = "model_startup_download_bytes_total"
DOWNLOAD_METADATA = "model_startup_download_metadata_requests_total"
TIME_TO_FIRST_TOKEN = "model_startup_time_to_first_token_seconds"  # process start to the first request's end
# Start-ups in flight: gauges reported only while a start-up runs (gone at ready()).
INFLIGHT_ELAPSED = "model_startup_inflight_elapsed_seconds"
INFLIGHT_PHASE_ELAPSED = "model_startup_inflight_phase_elapsed_seconds"
INFLIGHT_LOADED = "model_startup_inflight_loaded_bytes"
INFLIGHT_EXPECTED = "model_startup_inflight_expected_bytes"
INFLIGHT_REMAINING = "model_startup_inflight_remaining_seconds"  # the time-to-ready estimate
INFLIGHT_PROCESS = "job, instance, service_name, coldstart_model_name, host_type"

# The filters every query carries; variables named after what they select.
FILTERS = 'coldstart_model_name=~"$model", host_type=~"$instance_type", service_version=~"$version"'
STEP = "$__rate_interval"  # time series: the series seen around each point
WHOLE = "$__range"  # tables and stats: the series seen in the dashboard's time range


def selector(metric: str, *matchers: str) -> str:
    return metric + "{" + ", ".join((FILTERS,) + matchers) + "}"


def latest(metric: str, *matchers: str, window: str = STEP) -> str:
    """The value of each series seen in the window (one start-up per process)."""
    return f"max_over_time({selector(metric, *matchers)}[{window}])"


def per_startup(numerator: str, by: str) -> str:
    """Mean per start-up, by ``by``: a sum over processes divided by how many start-ups
    they made (every start-up counts, also those where the numerator's series is absent)."""
    return (f"sum by ({by}) ({numerator}) / ignoring ({by}) group_left "
            f"sum ({latest(DURATION + '_count')})")


def quantile(q: float, metric: str, by: str, *matchers: str) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) ({latest(metric + '_bucket', *matchers)}))"


def mean(metric: str, by: str, *matchers: str, window: str = STEP) -> str:
    return (f"sum by ({by}) ({latest(metric + '_sum', *matchers, window=window)}) / "
            f"sum by ({by}) ({latest(metric + '_count', *matchers, window=window)})")


def query(expr: str, legend: str = "", ref: str = "A", exemplar: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(PROMETHEUS).range()
    if legend:
        q = q.legend_format(legend)
    if exemplar:
        q = q.exemplar(True)
    return q


def instant_table(expr: str, ref: str = "A") -> prometheus.Dataquery:
    return (prometheus.Dataquery().expr(expr).ref_id(ref).datasource(PROMETHEUS)
            .instant().format(PromQueryFormat.TABLE))


def table_panel(title: str, description: str, expr: str, value_name: str, width: int,
                height: int = 8) -> table.Panel:
    """An instant query as a table, largest value first, its value column named."""
    return (table.Panel().title(title).description(description).datasource(PROMETHEUS).span(width).height(height)
            .unit("s").show_header(True).with_target(instant_table(expr))
            .sort_by([common_builders.TableSortByFieldState().display_name(value_name).desc(True)])
            .with_transformation(DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True}, "renameByName": {"Value": value_name}})))


def series_panel(title: str, description: str, unit: str, *targets, stacked: bool = False,
                 width: int = 12) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).unit(unit)
             .datasource(PROMETHEUS).span(width).height(8).min(0)
             .legend(common_builders.VizLegendOptions().show_legend(True)
                     .display_mode(common.LegendDisplayMode.TABLE).placement(common.LegendPlacement.BOTTOM)
                     .calcs(["lastNotNull", "max"])))
    if stacked:
        panel = (panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
                 .draw_style(common.GraphDrawStyle.BARS).fill_opacity(80))
    for target in targets:
        panel = panel.with_target(target)
    return panel


def label_variable(name: str, label: str, metric: str, title: str) -> db.QueryVariable:
    return (db.QueryVariable(name).label(title).datasource(PROMETHEUS)
            .query(f"label_values({metric}, {label})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(VariableOption(selected=True, text="All", value="$__all")))


def trace_search_link() -> db.DashboardLink:
    """Explore the trace data source for this process's ``model.startup`` span: the row's
    service, host and pid (from ``target_info``) name the process; no trace id is a label."""
    pane = {
        "a": {
            "datasource": "${" + TRACES_VARIABLE + "}",
            "queries": [{
                "refId": "A",
                "queryType": "search",
                "service": "${__data.fields.service_name}",
                "operation": "model.startup",
                "tags": "host.name=${__data.fields.host_name} process.pid=${__data.fields.process_pid}",
            }],
            "range": {"from": "${__from}", "to": "${__to}"},
        }
    }
    encoded = quote(json.dumps(pane, separators=(",", ":")), safe="${}_.")
    return (db.DashboardLink("Open this start-up's trace")
            .url(f"/explore?schemaVersion=1&panes={encoded}").target_blank(True))


def exemplar_trace_link() -> db.DashboardLink:
    """An exemplar's trace: each histogram point carries its start-up's root trace id as an
    exemplar (label ``trace_id``), so hovering a slow bucket's dot opens that very trace in
    the ``${traces}`` data source (Jaeger or Tempo: a query that is a trace id)."""
    pane = {"a": {"datasource": "${" + TRACES_VARIABLE + "}",
                  "queries": [{"refId": "A", "query": "${__data.fields.trace_id}"}],
                  "range": {"from": "${__from}", "to": "${__to}"}}}
    encoded = quote(json.dumps(pane, separators=(",", ":")), safe="${}_.")
    return (db.DashboardLink("Open this exemplar's trace")
            .url(f"/explore?schemaVersion=1&panes={encoded}").target_blank(True))


def build() -> db.Dashboard:
    slowest = (
        f"topk(20, max by (job, instance, service_name, service_version, coldstart_model_name, host_type, "
        f"coldstart_ready) ({latest(DURATION + '_sum', window=WHOLE)})"
        f" * on (job, instance) group_left (host_name, process_pid) "
        f"max by (job, instance, host_name, process_pid) (max_over_time(target_info[{WHOLE}])))"
    )
    attributed = 'coldstart_phase!="unattributed"'
    dominant = (
        f"topk by (coldstart_model_name) (1, sum by (coldstart_model_name, coldstart_phase) "
        f"({latest(PHASE + '_sum', attributed, window=WHOLE)}))"
    )
    first, rest = 'coldstart_shard_position="first"', 'coldstart_shard_position="rest"'
    first_vs_rest = f"({mean(SHARD, 'coldstart_model_name', first)}) / ({mean(SHARD, 'coldstart_model_name', rest)})"
    direction = 'coldstart_phase=~"$direction"'
    # Phases whose work is the host's own: their busy time is their bytes' time.
    host = 'coldstart_phase=~"deserialize|h2h|pin"'
    pinned = 'coldstart_copy_memory="pinned"'
    # Directions without pinned bytes count as 0, not as missing: "or 0 * all".
    pinned_share = (
        f"sum by (coldstart_phase) ({latest(COPY_BYTES, direction, pinned)} or 0 * {latest(COPY_BYTES, direction)})"
        f" / sum by (coldstart_phase) ({latest(COPY_BYTES, direction)})"
    )

    stuck = (f"topk(20, max by ({INFLIGHT_PROCESS}, coldstart_phase) "
             f"({selector(INFLIGHT_PHASE_ELAPSED)}))")
    loaded_share = (f"max by ({INFLIGHT_PROCESS}) ({selector(INFLIGHT_LOADED)}) / "
                    f"max by ({INFLIGHT_PROCESS}) ({selector(INFLIGHT_EXPECTED)} > 0)")
    # One series per start-up in flight (the phase label changes as it goes: not a series break).
    time_to_ready = f"max by ({INFLIGHT_PROCESS}) ({selector(INFLIGHT_REMAINING)})"

    return (
        db.Dashboard("Model start-up (otel-coldstart)").uid(UID)
        .description("Where model start-up time goes, across deploys and instance types. "
                     "Generated by dashboards/generate.py; see docs/metrics.md.")
        .tags(["otel-coldstart", "startup"]).editable().refresh("1m").time("now-24h", "now")
        .timezone(common.TimeZoneBrowser)
        .with_variable(db.DatasourceVariable("datasource").label("Metrics").type("prometheus"))
        .with_variable(db.DatasourceVariable(TRACES_VARIABLE).label("Traces").type("jaeger"))
        .with_variable(label_variable("model", "coldstart_model_name", DURATION + "_count", "Model"))
        .with_variable(label_variable("instance_type", "host_type", DURATION + "_count", "Instance type"))
        .with_variable(label_variable("version", "service_version", DURATION + "_count", "Version"))
        .with_variable(label_variable("direction", "coldstart_phase", COPY_BYTES, "Copy direction"))

        .with_row(db.Row("Start-ups in flight"))
        .with_panel(table_panel(
            "Stuck longest in one phase",
            "Start-ups running now (their gauges vanish at ready()), the ones that have been longest in their "
            "current phase first. A stall (no progress for stall_after_s) is in the process's log and trace.",
            stuck, "Time in phase", width=12))
        .with_panel(series_panel(
            "Time to ready (estimate)",
            "Seconds left to ready() per start-up in flight, estimated from where it is now and how earlier "
            "start-ups of the same service went (docs/metrics.md, 'Time to ready'). A service's first start-up "
            "has no history and so no estimate: it is absent here, not zero.",
            "s", query(time_to_ready, "{{instance}} {{coldstart_model_name}}"), width=12))
        .with_panel(series_panel(
            "Checkpoint loaded (share of expected)",
            "Bytes read so far over the index file's total_size (else the files seen), per start-up in flight.",
            "percentunit", query(loaded_share, "{{instance}} {{coldstart_model_name}}"), width=12))
        .with_panel(series_panel(
            "Start-ups in flight by phase", "How many start-ups are running now, by the phase they are in.",
            "none", query(f"count by (coldstart_phase) ({selector(INFLIGHT_ELAPSED)})", "{{coldstart_phase}}"),
            stacked=True, width=12))

        .with_row(db.Row("Start-up time"))
        .with_panel(series_panel(
            "Start-up time p50 / p95 by model and instance type",
            "Process start to ready(), over the start-ups that became ready. Exemplar dots link to traces.",
            "s",
            query(quantile(0.5, DURATION, "coldstart_model_name, host_type", 'coldstart_ready="true"'),
                  "p50 {{coldstart_model_name}} on {{host_type}}", "A", exemplar=True),
            query(quantile(0.95, DURATION, "coldstart_model_name, host_type", 'coldstart_ready="true"'),
                  "p95 {{coldstart_model_name}} on {{host_type}}", "B", exemplar=True),
            width=16).data_links([exemplar_trace_link()]))
        .with_panel(
            stat.Panel().title("Start-ups by outcome").datasource(PROMETHEUS).span(8).height(8)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
            .graph_mode(common.BigValueGraphMode.NONE)
            .description("Processes that reported a start-up in the time range; ready=false means the "
                         "process exited (or got SIGTERM) before ready().")
            .with_target(query(f"sum by (coldstart_ready) ({latest(DURATION + '_count', window=WHOLE)})",
                               "ready={{coldstart_ready}}")))
        .with_panel(series_panel(
            "Mean start-up time by version", "Compare rollouts: one line per service.version.", "s",
            query(mean(DURATION, "service_version"), "{{service_version}}"), width=24))

        .with_row(db.Row("Phases"))
        .with_panel(series_panel(
            "Phase breakdown (mean seconds per start-up)",
            "Busy time per phase, stacked. With thread pools phases can add up to more than the wall time.",
            "s", query(per_startup(latest(PHASE + "_sum"), by="coldstart_phase"), "{{coldstart_phase}}"),
            stacked=True, width=16))
        .with_panel(table_panel(
            "Dominant phase by model",
            "The phase with the most busy time over the range (as `otel-coldstart analyze` names it: "
            "unattributed time is shown in the breakdown, not ranked).", dominant, "Busy time", width=8))

        .with_panel(series_panel(
            "Throughput of host phases (bytes over busy time)",
            "Deserialize: how fast checkpoint bytes were produced; pin and h2h: host copies. Copies to and from "
            "devices and casts are in \"Achieved copy and cast bandwidth\" (their busy time can be launch time).",
            "Bps", query(f"sum by (coldstart_phase) ({latest(BYTES, host)}) / sum by (coldstart_phase) "
                         f"({latest(PHASE + '_sum', host)})", "{{coldstart_phase}}"), width=24))

        .with_row(db.Row("Checkpoint shards"))
        .with_panel(series_panel(
            "Shard read time by page-cache state (p50 / p95)",
            "One point per checkpoint file read; cold = read from storage, warm = page cache.", "s",
            query(quantile(0.5, SHARD, "coldstart_cache_state"), "p50 {{coldstart_cache_state}}", "A"),
            query(quantile(0.95, SHARD, "coldstart_cache_state"), "p95 {{coldstart_cache_state}}", "B")))
        .with_panel(series_panel(
            "First-shard asymmetry (mean first shard / mean other shards)",
            "Above 1: the first file read is slower than the rest (cold cache, lazy initialisation).",
            "none", query(first_vs_rest, "{{coldstart_model_name}}")))
        .with_panel(series_panel(
            "Weights left on storage at ready() and read by the first requests (mean per start-up)",
            "Mapped checkpoint bytes not in the page cache at ready() (safetensors, transformers 5, "
            "torch.load(mmap=True) keep tensors on the file's pages), and how much of them the first requests "
            "then read from storage (followed for 5 minutes after ready()). Pre-fault the files, or a warm-up "
            "forward pass, before ready() moves that read into the start-up.", "bytes",
            query(per_startup(latest(LAZY_UNREAD), by="coldstart_model_name"),
                  "not read at ready() {{coldstart_model_name}}", "A"),
            query(per_startup(latest(FIRST_USE), by="coldstart_model_name"),
                  "read after ready() {{coldstart_model_name}}", "B"), width=24))

        .with_row(db.Row("Copies"))
        .with_panel(series_panel(
            "Achieved copy and cast bandwidth by direction (p50)",
            "Bytes per second per start-up: h2d is host-to-device (PCIe), h2h host copies into preallocated "
            "weights. Queued work (non-blocking copies, GPU casts, device-to-device copies) over its device "
            "time, synchronous work over its host time; start-ups whose figure was above the host link's bound "
            "(a timing error) recorded none.", "Bps",
            query(quantile(0.5, COPY_THROUGHPUT, "coldstart_phase", 'coldstart_phase=~"$direction|cast"'),
                  "{{coldstart_phase}}")))
        .with_panel(series_panel(
            "Pinned share of copied bytes",
            "Share of bytes copied from pinned memory. Only host-to-device copies ask; pageable H2D "
            "copies can cost ~40% of PCIe bandwidth.", "percentunit",
            query(pinned_share, "{{coldstart_phase}}")))
        .with_panel(series_panel(
            "Bytes copied per start-up by direction and source memory", "Mean per start-up.", "bytes",
            query(per_startup(latest(COPY_BYTES, direction), by="coldstart_phase, coldstart_copy_memory"),
                  "{{coldstart_phase}} {{coldstart_copy_memory}}"), stacked=True, width=24))

        .with_row(db.Row("CUDA graphs"))
        .with_panel(series_panel(
            "Graph capture time per start-up (mean)", "0 when the start-ups captured no CUDA graphs.", "s",
            query(f"sum by (coldstart_model_name) ({latest(GRAPH_CAPTURE_TIME)}) / "
                  f"sum by (coldstart_model_name) ({latest(DURATION + '_count')})", "{{coldstart_model_name}}")))
        .with_panel(series_panel(
            "Graphs captured per start-up (mean)", "CUDA graph captures before ready().", "none",
            query(f"sum by (coldstart_model_name) ({latest(GRAPH_CAPTURES)}) / "
                  f"sum by (coldstart_model_name) ({latest(DURATION + '_count')})", "{{coldstart_model_name}}")))

        .with_row(db.Row("Model delivery"))
        .with_panel(series_panel(
            "Bytes downloaded per start-up (mean)",
            "Received from the network (huggingface_hub, S3) before the weights could be read; 0 on a node "
            "whose cache already held them. Pre-staging the weights on the node or a volume takes it out "
            "of the start-up.", "bytes",
            query(per_startup(latest(DOWNLOAD_BYTES), by="coldstart_model_name"), "{{coldstart_model_name}}")))
        .with_panel(series_panel(
            "Download phase per start-up (mean)",
            "Busy time of the download phase: files fetched (per file time is "
            "model.startup.download.duration, in the traces per file) and the hub's metadata requests.", "s",
            query(mean(PHASE, "coldstart_model_name", 'coldstart_phase="download"'), "{{coldstart_model_name}}")))
        .with_panel(series_panel(
            "Hub metadata requests per start-up (mean)",
            "HEAD, repo-info and revision requests, also on a fully cached start: HF_HUB_OFFLINE=1 (or "
            "local_files_only) spares them where the cache is pre-staged.", "none",
            query(per_startup(latest(DOWNLOAD_METADATA), by="coldstart_model_name"), "{{coldstart_model_name}}"),
            width=24))

        .with_row(db.Row("Time to first token"))
        .with_panel(series_panel(
            "Time to first token p50 / p95 by model and instance type",
            "model.startup.time_to_first_token: process start to the end of the first request served "
            "(successful ones): the start-up plus its first request, as a user waits for it. Exemplar dots "
            "link to traces.", "s",
            query(quantile(0.5, TIME_TO_FIRST_TOKEN, "coldstart_model_name, host_type"),
                  "p50 {{coldstart_model_name}} on {{host_type}}", "A", exemplar=True),
            query(quantile(0.95, TIME_TO_FIRST_TOKEN, "coldstart_model_name, host_type"),
                  "p95 {{coldstart_model_name}} on {{host_type}}", "B", exemplar=True),
            width=24).data_links([exemplar_trace_link()]))

        .with_row(db.Row("Slowest start-ups"))
        .with_panel(
            table_panel("Slowest recent start-ups",
                        "The 20 slowest start-ups in the range, one row per process. The link opens the "
                        "process's model.startup trace in the ${traces} data source.",
                        slowest, "Start-up time", width=24, height=10)
            .data_links([trace_search_link()]))
    )


def render() -> str:
    dashboard = build().build()
    return JSONEncoder(sort_keys=True, indent=2).encode(dashboard) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        with open(OUTPUT, encoding="utf-8") as handle:
            if handle.read() != text:
                print(f"{OUTPUT} is out of date: run python dashboards/generate.py", file=sys.stderr)
                return 1
        return 0
    with open(OUTPUT, "w", encoding="utf-8") as handle:
        handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
