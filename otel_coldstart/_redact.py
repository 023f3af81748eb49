"""Redact secrets from a command line before it goes on a span.

``otel-coldstart run -- python serve.py --hf-token=hf_xxx`` must not store the token in a
trace, which is read by everyone with access to the tracing backend. What a trace needs is
what ran: the executable and the shape of its arguments. So the values of secret-looking
options (``--token X``, ``--api-key=X``, ``HF_TOKEN=X``), the password of a URL
(``https://user:pw@host``) and secret-looking query parameters are replaced by
``<redacted>``; everything else is kept as given.
"""

from __future__ import annotations

import re
import urllib.parse

REDACTED = "<redacted>"

# Words that make an option's value a secret, matched against the option name split at
# "-", "_" and "." (so --hf-token, --api_key, --db.password, AWS_SECRET_ACCESS_KEY).
_SECRET_WORDS = frozenset({
    "token", "tokens", "password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "key", "apikey",
    "auth", "authorization", "credential", "credentials", "cookie", "bearer", "signature", "sig",
})
_JOINED_SECRET_WORDS = ("apikey", "accesskey", "privatekey", "secretkey", "authtoken", "accesstoken", "password")
_WORD_SPLIT = re.compile(r"[-_.]+")
_OPTION = re.compile(r"^(-{1,2})([A-Za-z][\w.-]*)$")
_OPTION_WITH_VALUE = re.compile(r"^(-{1,2}[A-Za-z][\w.-]*)=(.*)$", re.S)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)=(.*)$", re.S)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):(?P<password>[^/@\s]*)@")


def is_secret_name(name: str) -> bool:
    lowered = name.lower()
    words = set(_WORD_SPLIT.split(lowered)) - {""}
    compact = _WORD_SPLIT.sub("", lowered)
    return bool(words & _SECRET_WORDS) or any(joined in compact for joined in _JOINED_SECRET_WORDS)


def redact_text(value: str) -> str:
    """URL passwords and secret-looking query parameters inside one argument."""
    value = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    if "?" in value or "&" in value:
        value = re.sub(r"(?P<sep>[?&;])(?P<name>[^=&?;#\s]+)=(?P<val>[^&;#\s]*)",
                       lambda m: f"{m['sep']}{m['name']}={REDACTED}" if is_secret_name(
                           urllib.parse.unquote(m["name"])) else m.group(0), value)
    return value


def redact_argv(argv: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` with the values of secret-looking options, assignments and URL credentials
    replaced by ``<redacted>``."""
    result: list[str] = []
    redact_next = False
    for arg in map(str, argv):
        if redact_next:
            redact_next = False
            if not arg.startswith("-"):
                result.append(REDACTED)
                continue
        with_value = _OPTION_WITH_VALUE.match(arg)
        if with_value is not None:
            name = with_value.group(1).lstrip("-")
            if is_secret_name(name):
                result.append(f"{with_value.group(1)}={REDACTED}")
                continue
            result.append(f"{with_value.group(1)}={redact_text(with_value.group(2))}")
            continue
        option = _OPTION.match(arg)
        if option is not None:
            redact_next = option.group(1) == "--" and is_secret_name(option.group(2))
            result.append(arg)
            continue
        assignment = _ASSIGNMENT.match(arg)
        if assignment is not None and is_secret_name(assignment.group(1)):
            result.append(f"{assignment.group(1)}={REDACTED}")
            continue
        result.append(redact_text(arg))
    return tuple(result)
