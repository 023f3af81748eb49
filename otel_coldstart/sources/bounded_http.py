"""One HTTP GET with hard bounds, for the live sources (Jaeger, Tempo).

urllib's ``urlopen`` is not enough against a hostile or broken server: its timeout is per
socket operation (a server dripping one byte a second never trips it), it follows redirects
to other hosts with the ``Authorization`` header built from URL credentials, and to
``ftp://``. Here:

- the whole request, redirects included, ends by ``deadline`` (a timer shuts the socket
  down, so no single blocking read outlives it). The timer holds the socket itself, not the
  connection: over HTTP/1.0 or with ``Connection: close``, ``getresponse()`` hands the
  socket to the response and leaves the connection with none;
- only http and https are followed, at most ``MAX_REDIRECTS`` times, and credentials are
  sent to the origin they were given for only (scheme, host and port);
- a body is read up to the bytes ``budget`` has left, which the caller shares between all
  the requests of one command.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 64 * 1024


class FetchError(Exception):
    """One line, without credentials. ``kind``: ``timeout``, ``connect``, ``http``,
    ``too_large``, ``redirect``, ``url``."""

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.kind = kind
        self.status = status


class ByteBudget:
    """Bytes that may still be fetched, shared by all the requests of one command."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def get(url: str, headers: Mapping[str, str], *, deadline: float, budget: ByteBudget,
        credentials: tuple[tuple[str, str, int], str] | None = None) -> bytes:
    """The body of a 2xx answer to GET ``url``. ``credentials``: (origin, Authorization
    value), sent only to that origin. ``deadline``: ``time.monotonic()`` time."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise FetchError(f"refused to follow a redirect to a {parts.scheme or 'relative'}: URL "
                             "(only http and https)", "redirect")
        request_headers = dict(headers)
        if credentials is not None and origin(url) == credentials[0]:
            request_headers["Authorization"] = credentials[1]
        status, location, body = _get_once(parts, request_headers, deadline, budget)
        if status in _REDIRECTS:
            if not location:
                raise FetchError(f"HTTP {status} without a Location", "http", status)
            url = urllib.parse.urljoin(url, location)
            continue
        if not 200 <= status < 300:
            raise FetchError(f"HTTP {status}", "http", status)
        return body
    raise FetchError(f"more than {MAX_REDIRECTS} redirects", "redirect")


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("deadline passed", "timeout")
    return left


def _get_once(parts, headers: dict, deadline: float, budget: ByteBudget) -> tuple[int, str | None, bytes]:
    host = parts.hostname
    try:
        port = parts.port
    except ValueError:
        raise FetchError("not a valid URL (port)", "url") from None
    timeout = _remaining(deadline)
    if parts.scheme.lower() == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    watchdog = None
    try:
        connection.connect()
        # From here on one timer bounds everything: headers and body, however slowly sent.
        watchdog = threading.Timer(_remaining(deadline), _shut_down, (connection.sock,))
        watchdog.daemon = True
        watchdog.start()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        status = response.status
        if status in _REDIRECTS:
            return status, response.getheader("Location"), b""
        if not 200 <= status < 300:
            return status, None, b""
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > budget.left:
            raise FetchError(f"an answer of {int(declared) / 2**20:.1f} MiB would go over the "
                             f"{budget.limit >> 20} MiB limit in all", "too_large")
        chunks = []
        while True:
            _remaining(deadline)
            chunk = response.read(min(_CHUNK, budget.left + 1))
            if not chunk:
                break
            budget.used += len(chunk)
            if budget.used > budget.limit:
                raise FetchError(f"answers over the {budget.limit >> 20} MiB limit in all", "too_large")
            chunks.append(chunk)
        _remaining(deadline)  # a read cut short by the watchdog is a timeout, not a body
        return status, None, b"".join(chunks)
    except FetchError:
        raise
    except TimeoutError:  # socket.timeout is TimeoutError since 3.10
        raise FetchError("timed out", "timeout") from None
    except ssl.SSLError as exc:
        raise FetchError(f"TLS error ({exc.reason or type(exc).__name__})", "connect") from None
    except (ConnectionRefusedError, socket.gaierror) as exc:
        raise FetchError(f"cannot connect ({exc.strerror or exc})", "connect") from None
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if time.monotonic() >= deadline:
            raise FetchError("timed out", "timeout") from None
        raise FetchError(f"connection failed ({type(exc).__name__})", "connect") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        connection.close()


def _shut_down(sock: socket.socket | None) -> None:
    # The response's file object keeps the descriptor open after the connection let go of
    # it: shutting the socket down ends a read blocked in either.
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
