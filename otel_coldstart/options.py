"""``instrument()``'s options, checked: each one's value from the call, else its
environment variable, else its default. A bad value passed is the caller's mistake
(ValueError); a bad environment value is logged and the default used (the host must still
start). Nothing is read from disk here."""

from __future__ import annotations

import os
from typing import Any

from ._errors import logger

DEFAULT_PROGRESS_INTERVAL_S = 5.0
DEFAULT_STALL_AFTER_S = 120.0  # minutes-long loads have quiet stretches; two minutes is not one
ENV_PROGRESS_INTERVAL_S = "OTEL_COLDSTART_PROGRESS_INTERVAL_S"
ENV_STALL_AFTER_S = "OTEL_COLDSTART_STALL_AFTER_S"
ENV_HISTORY_DIR = "OTEL_COLDSTART_HISTORY_DIR"


class Options:
    """``instrument()``'s options, checked (see :func:`otel_coldstart.instrument`)."""

    __slots__ = ("start_at", "output_dir", "summary", "export_timeout_s", "handle_sigterm", "metric_attributes",
                 "prometheus_port", "progress_interval_s", "stall_after_s", "history_dir")

    def __init__(self, start_at: str = "process", output_dir: str | None = None, summary: bool | None = None,
                 export_timeout_s: float = 5.0, handle_sigterm: bool = True,
                 metric_attributes: dict | None = None, prometheus_port: int | None = None,
                 progress_interval_s: float | None = None, stall_after_s: float | None = None,
                 history_dir=None) -> None:
        if start_at not in ("process", "instrument"):
            raise ValueError("start_at must be 'process' or 'instrument'")
        self.start_at = start_at
        self.output_dir = output_dir
        self.summary = summary
        self.export_timeout_s = float(export_timeout_s)
        self.handle_sigterm = handle_sigterm
        self.metric_attributes = dict(metric_attributes or {})
        self.prometheus_port = prometheus_port
        self.progress_interval_s = seconds_option(progress_interval_s, ENV_PROGRESS_INTERVAL_S,
                                                  DEFAULT_PROGRESS_INTERVAL_S)
        self.stall_after_s = seconds_option(stall_after_s, ENV_STALL_AFTER_S, DEFAULT_STALL_AFTER_S)
        self.history_dir = history_directories(history_dir)


def seconds_option(value: Any, env: str, default: float) -> float:
    """An interval option: the value passed, else the environment variable, else ``default``.
    0 turns the feature off."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise ValueError(f"{env.split('OTEL_COLDSTART_')[-1].lower()} must be a number of seconds >= 0 "
                             f"(0 turns it off), got {value!r}")
        return float(value)
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        parsed = float(text)
        if not 0 <= parsed < float("inf"):
            raise ValueError(text)
        return parsed
    except ValueError:
        logger.warning("otel-coldstart: %s=%r is not a number of seconds >= 0; using %s", env, text, default)
        return default


def env_flag(name: str, default: bool) -> bool:
    """A yes/no environment variable (``OTEL_COLDSTART_SUMMARY``): unset or empty is ``default``."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def history_directories(value) -> tuple[str, ...] | None:
    """Where the time-to-ready estimate looks for earlier start-ups: the directories passed
    (a path, several joined by os.pathsep, or a list), else ``OTEL_COLDSTART_HISTORY_DIR``;
    ``()`` for the default (the directory of this process's own trace files); None: off
    (``False``, or the variable set to ``off``). Nothing is read here."""
    if value is None:
        text = os.environ.get(ENV_HISTORY_DIR, "").strip()
        if text.lower() == "off":
            return None
        return tuple(p for p in text.split(os.pathsep) if p)
    if value is False:
        return None
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, (str, os.PathLike)) for p in value):
        paths = tuple(p for item in value for p in os.fspath(item).split(os.pathsep) if p)
        if paths:
            return paths
    raise ValueError(f"history_dir must be a directory (or several joined by {os.pathsep!r}, or a list of them), "
                     f"or False to turn the time-to-ready estimate off; got {value!r}")
