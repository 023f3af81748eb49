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


def load_exporter_class(signal: str, name: str):
    """The exporter class an installed package registers under ``name`` for ``signal``
    (the SDK's lookup), or None with a warning when there is none or it cannot be imported."""
    variable = EXPORTER_VARIABLE[signal]
    try:
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP[signal]) if ep.name == name]
        if not found:
            logger.warning("otel-coldstart: %s names %r, which no installed package provides: that "
                           "exporter is left out", variable, name)
            return None
        return found[0].load()
    except Exception as exc:  # an exporter package that does not import: the host still runs
        logger.warning("otel-coldstart: %s=%s: cannot load exporter %r (%s: %s): it is left out",
                       variable, os.environ.get(variable, ""), name, type(exc).__name__, exc)
        return None
