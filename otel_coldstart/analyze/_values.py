"""Value normalisation shared by the readers: ids, timestamps, typed attribute values.

Every tracing system spells the same facts differently (hex in either case, ids without
leading zeros, base64 ids, nanosecond strings, microsecond numbers, int64 as strings);
these helpers turn them into the one form :class:`~.model.Span` promises.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import string

MAX_UNIX_NS = 2**63 - 1  # what OTLP's fixed64 / int64 nanoseconds can hold
_HEX = frozenset(string.hexdigits)


class TraceReadError(Exception):
    """The input is not a trace we can read. The message is one line; ``kind`` selects the
    CLI exit code: ``unreadable`` (missing, permissions), ``too_large`` (over the size limit),
    ``invalid`` (empty, not JSON, truncated, wrong shape, values out of range)."""

    def __init__(self, message: str, kind: str = "invalid") -> None:
        super().__init__(" ".join(str(message).split()))
        self.kind = kind

    def __reduce__(self):  # kept whole when a reading process hands it back (cli/_inputs.py)
        return type(self), (str(self), self.kind)


def hex_id(value: object, width: int, *, allow_base64: bool = False) -> str:
    """Lowercase hex, zero-padded to ``width`` (16 for spans, 32 for traces).

    Jaeger printed ids with %x before Dec 2019, so ``ec2b4e0bcea566d`` (15 chars) is the same
    id as ``0ec2b4e0bcea566d``. Tempo's jsonpb writes ids as base64 of the raw bytes.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return format(value, "x").zfill(width)[-width:] if value < 16**width else format(value, "x")
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if text and len(text) <= width and set(text) <= _HEX:
        return text.lower().zfill(width)
    if allow_base64 or not set(text) <= _HEX:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if raw and len(raw) <= width // 2:
            return raw.hex().zfill(width)
    return text.lower()


def unix_ns(value: object, what: str, scale: int = 1) -> int:
    """Nanoseconds from an int, a float or a decimal string; ``scale`` is nanoseconds per
    unit (1 for OTLP, 1000 for Jaeger's and Zipkin's microseconds). Strings are parsed
    exactly: a float64 cannot hold 19-digit nanoseconds."""
    if isinstance(value, bool) or value is None:
        raise TraceReadError(f"{what} is missing or not a number")
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 30:
            raise TraceReadError(f"{what} is not a number: {value[:40]!r}")
        try:
            number = int(text)
        except ValueError:
            try:
                number = _finite(float(text), what)
            except ValueError:
                raise TraceReadError(f"{what} is not a number: {value[:40]!r}") from None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float):
        number = _finite(value, what)
    else:
        raise TraceReadError(f"{what} is not a number")
    result = int(number * scale) if isinstance(number, float) else number * scale
    if result < 0 or result > MAX_UNIX_NS:
        raise TraceReadError(f"{what} is out of range ({str(value)[:40]})")
    return result


def duration_ns(value: object, what: str, scale: int) -> int:
    if value is None:
        return 0  # Zipkin omits duration on incomplete spans: show them as instants
    return unix_ns(value, what, scale)


def _finite(value: float, what: str):
    if not math.isfinite(value):
        raise TraceReadError(f"{what} is not finite")
    return int(value) if value.is_integer() else value


def coerce_string(value: str):
    """Zipkin tags are always strings: give our numeric and boolean attributes their type
    back so a trace reads the same whichever system stored it."""
    if value == "true":
        return True
    if value == "false":
        return False
    if len(value) <= 20:
        try:
            number = int(value)
        except ValueError:
            pass
        else:
            return number if INT64_MIN <= number <= INT64_MAX else value
    try:
        real = float(value)
    except ValueError:
        return value
    return real if math.isfinite(real) else value


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def int64(value: object) -> int | None:
    """An int attribute as OTLP and Jaeger define it (int64), or None for anything that is
    not one: Infinity/NaN, a 400-digit number, a fraction. Analysis divides and sums these
    as floats; an out-of-range one would overflow there.

    A string in exponent or fraction notation (``"1e3"``, ``"1.0"``) is read as the float
    it spells when that is whole, as the protobuf JSON mapping allows for integers and as
    the fast reader's decoder (msgspec, read_otlp_fast.py) reads it: both paths give the
    same number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = int(text) if len(text) <= 20 else None  # int() of 400 digits is slow; a float is not
        except ValueError:
            value = None
        if value is None:
            try:
                value = float(text)
            except ValueError:
                return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if INT64_MIN <= value <= INT64_MAX else None


def finite_float(value: object) -> float | None:
    """A double attribute, or None for NaN/Infinity (json accepts them; no analysis can use
    them, and they would make the JSON output invalid)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def as_list(value: object) -> list:
    return value if isinstance(value, list) else []


def as_dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


_TYPE_PREFIX = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:")


def failure_type(recorded: object, exception_type: object, message: object) -> str | None:
    """What a failed span failed with, from the first of: the ``error.type`` attribute, the
    exception event's ``exception.type``, the status message (its leading ``Type:`` when it
    has one, as the OTel SDKs write ``f"{type}: {message}"``, else the message itself)."""
    for value in (recorded, exception_type):
        if isinstance(value, str) and value.strip():
            return value.strip()[:120]
    if isinstance(message, str) and message.strip():
        match = _TYPE_PREFIX.match(message)
        return match.group(1) if match else message.strip()[:120]
    return None
