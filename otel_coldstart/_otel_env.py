"""The OpenTelemetry SDK's environment rules for exporters, read the way the SDK reads them.

``opentelemetry-sdk`` (``opentelemetry/sdk/_configuration``, which ``opentelemetry-instrument``
runs through a distro's configurator) and its providers decide:

- ``OTEL_SDK_DISABLED``: ``true`` (any case, surrounding spaces ignored) disables every SDK
  tracer and meter provider; any other value, or none, leaves them on.
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: a comma-separated list of exporter
  names, each looked up in the ``opentelemetry_traces_exporter`` /
  ``opentelemetry_metrics_exporter`` entry points (``console``, ``otlp``,
  ``otlp_proto_grpc``, ``otlp_proto_http``, ``prometheus``, or a package's own). ``none``
  (the whole value) means no exporter. ``otlp`` is resolved by
  ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc`` or
  ``http/protobuf``, and **grpc when neither is set** (the Python SDK's choice, which the
  ``opentelemetry-distro`` also sets).

Where the SDK raises (an unknown exporter name, ``otlp`` with an unknown protocol) and so
configures nothing, a plugin running inside the host must not: we log one warning and
leave that exporter out. ``none`` inside a longer list, which the SDK rejects, turns the
signal's export off (what the user evidently meant), with a warning.

Unset or empty, a variable leaves the choice to the embedded default (see
:mod:`otel_coldstart.export` and :func:`otel_coldstart.metrics.configure_metrics`).
Only the standard library here: it is read on every ``instrument()``.
"""

from __future__ import annotations

import os

from ._errors import logger

EXPORTER_VARIABLE = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER"}
OTLP_PROTOCOL_VARIABLE = {"traces": "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                          "metrics": "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"}
OTLP_GRPC = "otlp_proto_grpc"
OTLP_HTTP = "otlp_proto_http"
_OTLP_BY_PROTOCOL = {"grpc": OTLP_GRPC, "http/protobuf": OTLP_HTTP}
ENTRY_POINT_GROUP = {"traces": "opentelemetry_traces_exporter", "metrics": "opentelemetry_metrics_exporter"}


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``, exactly as the SDK's providers test it."""
    return os.environ.get("OTEL_SDK_DISABLED", "").lower().strip() == "true"


def exporter_names(signal: str) -> list[str] | None:
    """The exporters ``OTEL_<SIGNAL>_EXPORTER`` names, ``otlp`` resolved to its protocol's
    entry-point name; ``[]`` for ``none``; ``None`` when unset or empty (the embedded
    default decides)."""
    variable = EXPORTER_VARIABLE[signal]
    value = os.environ.get(variable, "")
    if not value.strip():
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if any(name.lower() == "none" for name in names):
        if len(names) > 1:
            logger.warning("otel-coldstart: %s=%s: 'none' turns the export of %s off; the other names are "
                           "ignored", variable, value, signal)
        return []
    resolved = []
    for name in names:
        if name == "otlp":
            protocol = otlp_protocol(signal)
            if protocol is None:
                resolved.append(OTLP_GRPC)
            elif protocol in _OTLP_BY_PROTOCOL:
                resolved.append(_OTLP_BY_PROTOCOL[protocol])
            else:
                logger.warning("otel-coldstart: %s=otlp with unsupported OTLP protocol %r (grpc or "
                               "http/protobuf): no OTLP exporter for %s", variable, protocol, signal)
        elif name not in resolved:
            resolved.append(name)
    return resolved


def otlp_protocol(signal: str) -> str | None:
    """The OTLP protocol the environment asks for ``signal``, or None when unset."""
    value = os.environ.get(OTLP_PROTOCOL_VARIABLE[signal]) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    return value.strip() if value and value.strip() else None


# The exporters the plugin knows by name, per signal: (module, class, the distribution's
# package probed for presence without importing the exporter; None: the SDK, a dependency).
# Imported only when made. Any other name is looked up among entry points, as the SDK does.
KNOWN_EXPORTERS = {
    "traces": {
        "console": ("opentelemetry.sdk.trace.export", "ConsoleSpanExporter", None),
        OTLP_GRPC: ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter",
                    "opentelemetry.exporter.otlp.proto.grpc"),
        OTLP_HTTP: ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter",
                    "opentelemetry.exporter.otlp.proto.http"),
    },
    "metrics": {
        "console": ("opentelemetry.sdk.metrics.export", "ConsoleMetricExporter", None),
        OTLP_GRPC: ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter",
                    "opentelemetry.exporter.otlp.proto.grpc"),
        OTLP_HTTP: ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter",
                    "opentelemetry.exporter.otlp.proto.http"),
    },
}


def otlp_endpoint_configured(signal: str) -> bool:
    """Whether the standard variables name an OTLP endpoint for ``signal`` (traces, metrics)."""
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    return bool(os.environ.get(specific) or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def chosen_exporters(signal: str) -> tuple[list[str], str] | None:
    """The exporters ``signal`` goes to, and what chose them: those ``OTEL_<SIGNAL>_EXPORTER``
    names (``[]`` for ``none``), else the embedded default's OTLP when an endpoint is set
    (the spec's ``http/protobuf`` unless the protocol variable says ``grpc``; the SDK's
    ``otlp`` defaults to grpc: :func:`exporter_names`); None when neither is set."""
    named = exporter_names(signal)
    if named is not None:
        return named, EXPORTER_VARIABLE[signal]
    if not otlp_endpoint_configured(signal):
        return None
    grpc = (otlp_protocol(signal) or "http/protobuf").lower() == "grpc"
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    return [OTLP_GRPC if grpc else OTLP_HTTP], specific if os.environ.get(specific) else "OTEL_EXPORTER_OTLP_ENDPOINT"


def exporter_installed(signal: str, name: str) -> bool:
    """Whether the known exporter ``name`` is installed, probed without importing it
    (find_spec imports only the namespace packages above the probed one); one that is not is
    left out, with the warning :func:`make_exporter` gives."""
    package = KNOWN_EXPORTERS[signal][name][2]
    if package is None:
        return True
    from importlib.util import find_spec

    try:
        if find_spec(package) is not None:
            return True
    except (ImportError, ValueError):
        pass
    exporter_left_out(signal, name, ModuleNotFoundError(f"No module named {package!r}"))
    return False


def exporter_class(signal: str, name: str):
    """The class of the exporter ``name`` for ``signal``: a known one from its module, any
    other the one an installed package registers under that name (the SDK's lookup).
    Raises when there is none or it does not import."""
    known = KNOWN_EXPORTERS[signal].get(name)
    if known is not None:
        import importlib

        return getattr(importlib.import_module(known[0]), known[1])
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP[signal]) if ep.name == name]
    if not found:
        raise LookupError(f"no installed package provides {name!r} in {ENTRY_POINT_GROUP[signal]}")
    return found[0].load()


def make_exporter(signal: str, name: str, wrap=None):
    """The exporter ``name``, made with no arguments as the SDK makes it (it reads its own
    ``OTEL_EXPORTER_*`` variables), then ``wrap``-ped if given (a reader around it); None,
    with a warning, when that fails: not installed, or refusing its configuration."""
    try:
        made = exporter_class(signal, name)()
        return made if wrap is None else wrap(made)
    except Exception as exc:  # the host still runs, without this exporter
        exporter_left_out(signal, name, exc)
        return None


def exporter_left_out(signal: str, name: str, exc: BaseException) -> None:
    logger.warning("otel-coldstart: cannot make the %s exporter %r (%s: %s): it is left out", signal, name,
                   type(exc).__name__, exc)
