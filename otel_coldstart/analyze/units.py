"""How numbers read: seconds, bytes and rates for people; durations parsed from them."""

from __future__ import annotations

import re


def format_seconds(ns: float) -> str:
    seconds = ns / 1e9
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms"


def json_seconds(ns: int) -> float:
    """Seconds as the JSON documents give them: to the nanosecond, no float noise past it."""
    return round(ns / 1e9, 9)


def per_second(nbytes: float, ns: float) -> float | None:
    """A rate of bytes over nanoseconds; None where either is not positive (no rate known)."""
    return nbytes / (ns / 1e9) if nbytes > 0 and ns > 0 else None


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - loop always returns


def format_rate(bytes_per_s: float | None) -> str:
    if bytes_per_s is None:
        return "-"
    return format_bytes(int(bytes_per_s)) + "/s"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|min|h)?\s*$")
_NS_PER = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, None: 1_000_000_000,
           "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}


def parse_duration_ns(text: str) -> int:
    """``90s``, ``1.5m``, ``500ms``, ``2h`` or a bare number of seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 500ms, 2m)")
    value = float(match.group(1)) * _NS_PER[match.group(2)]
    if value > 10**18:
        raise ValueError(f"duration too large: {text!r}")
    return int(value)
