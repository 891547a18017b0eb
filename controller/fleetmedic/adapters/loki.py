"""A small client for Loki's HTTP query API (``/loki/api/v1/query_range``) and its
websocket tail (``/loki/api/v1/tail``).

urllib3 (already here as the Kubernetes client's transport) with a pooled connection for
queries; websocket-client for the tail, over a connection of our own with the same TLS
verification (the system's CAs, host names checked) and, like urllib3's pool, no proxy
from the environment, and with the same headers (tenant, any auth header). Every failure
is one line: a :class:`~fleetmedic.errors.TemporaryError` for what may pass (Loki down, restarting,
overloaded: connection refused, timeouts, HTTP 429/5xx; a tail closed), a
:class:`~fleetmedic.errors.ConfigError` for what will not (a bad query: HTTP 400), and
:class:`TailRefused` when the tail's handshake gets an HTTP answer instead of a websocket
(a proxy that does not pass websockets, Loki's tail limits): the caller polls instead.
Header values (a bearer token) never appear in a message.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
import websocket  # websocket-client

from fleetmedic.errors import ConfigError, TemporaryError, one_line


@dataclass(frozen=True)
class Entry:
    labels: Mapping[str, str]  # the stream's labels (and Loki's structured metadata)
    ts: int  # nanoseconds since the epoch
    line: str


@dataclass(frozen=True)
class TailBatch:
    """One message of a tail: its entries (oldest first) and how many Loki dropped."""

    entries: list[Entry]
    dropped: int = 0


class TailRefused(TemporaryError):
    """The tail's websocket was refused (an HTTP status instead of a protocol switch, or
    closed by Loki before it delivered anything): polling works where this does not."""


MAX_BACKOFF = 60.0
"""Longest wait while Loki is away, for the source's polls and its tail alike."""
TAIL_SILENCE = 30.0
"""Loki's tail handler pings every second; this long without a frame means the
connection is dead though no error surfaced (a partition, a proxy holding it)."""


class LokiClient:
    def __init__(
        self,
        endpoint: str,
        *,
        tenant: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.headers = dict(headers or {})
        if tenant:
            self.headers["X-Scope-OrgID"] = tenant
        self.connect_timeout = min(5.0, timeout)
        self.http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=self.connect_timeout, read=timeout), retries=False
        )

    def query_range(self, query: str, start_ns: int, end_ns: int, limit: int = 5000) -> list[Entry]:
        """Entries of ``query`` in ``[start_ns, end_ns]``, oldest first (at most ``limit``)."""
        data = self._get(
            "/loki/api/v1/query_range",
            {
                "query": query,
                "start": str(start_ns),
                "end": str(end_ns),
                "limit": str(limit),
                "direction": "forward",
            },
        )
        entries = []
        for stream in data.get("result") or []:
            labels = dict(stream.get("stream") or {})
            for value in stream.get("values") or []:
                ts, line = value[0], value[1]
                extra = value[2] if len(value) > 2 and isinstance(value[2], Mapping) else {}
                entries.append(Entry({**labels, **extra}, int(ts), line))
        entries.sort(key=lambda e: e.ts)
        return entries

    def tail(self, query: str, start_ns: int, *, limit: int = 5000, delay_for: int = 0) -> Tail:
        """A websocket tail of ``query``: lines ingested from now on, after those of
        ``[start_ns, now]`` (at most ``limit``, Loki's replay). Returns once Loki follows
        the query (its first frame: a batch, or the ping it sends every second)."""
        return Tail(self, query, start_ns, limit=limit, delay_for=delay_for)

    def ready(self) -> bool:
        try:
            r = self.http.request("GET", self.endpoint + "/ready", headers=self.headers)
        except urllib3.exceptions.HTTPError:
            return False
        return r.status == 200

    def _get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        url = self.endpoint + path
        try:
            r = self.http.request("GET", url, fields=dict(params), headers=self.headers)
        except urllib3.exceptions.HTTPError as exc:
            raise TemporaryError(f"loki {self.endpoint}: {one_line(exc)}", delay=2.0) from None
        body = r.data.decode("utf-8", "replace")
        if r.status == 400:
            raise ConfigError(f"loki {self.endpoint}: bad query: {one_line(body)}")
        if r.status != 200:
            raise TemporaryError(
                f"loki {self.endpoint}: HTTP {r.status}: {one_line(body)}", delay=2.0
            )
        try:
            return json.loads(body)["data"]
        except (ValueError, KeyError, TypeError):
            raise TemporaryError(f"loki {self.endpoint}: unreadable answer", delay=2.0) from None


class Tail:
    """One websocket on ``/loki/api/v1/tail``. Messages are
    ``{"streams": [{"stream": labels, "values": [[ts, line], ...]}],
    "dropped_entries": [{"labels": ..., "timestamp": ...}]}`` (Loki's HTTP API)."""

    def __init__(
        self, client: LokiClient, query: str, start_ns: int, *, limit: int, delay_for: int
    ) -> None:
        self.where = f"loki {client.endpoint} tail"
        params = {"query": query, "start": str(start_ns), "limit": str(limit)}
        if delay_for:
            params["delay_for"] = str(delay_for)
        scheme, _, rest = client.endpoint.partition("://")
        url = (
            f"{'wss' if scheme == 'https' else 'ws'}://{rest}/loki/api/v1/tail?{urlencode(params)}"
        )
        self._pending: list[TailBatch] = []
        try:
            self.ws = websocket.create_connection(
                url,
                timeout=client.connect_timeout,
                header=dict(client.headers),
                # our own connection: websocket-client would take a proxy from the
                # environment (http_proxy), which the query client (urllib3) never does
                socket=_connect(client.endpoint, client.connect_timeout),
                enable_multithread=True,  # close() from another thread
            )
        except websocket.WebSocketBadStatusException as exc:
            raise TailRefused(
                f"{self.where}: HTTP {exc.status_code} instead of a websocket"
            ) from None
        except (websocket.WebSocketException, OSError) as exc:
            raise TemporaryError(f"{self.where}: {_why(exc)}", delay=2.0) from None
        self.heard = time.monotonic()
        first = self._frame(client.connect_timeout, opening=True)
        if first is None:
            self.close()
            raise TailRefused(
                f"{self.where}: no frame from Loki within {client.connect_timeout:g}s"
            )
        if first.entries or first.dropped:
            self._pending.append(first)

    def recv(self, timeout: float) -> TailBatch | None:
        """The next message with entries (None when none came within ``timeout``)."""
        if self._pending:
            return self._pending.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            got = self._frame(left)
            if got is not None and (got.entries or got.dropped):
                return got

    def _frame(self, timeout: float, opening: bool = False) -> TailBatch | None:
        """One frame: a batch (empty for a ping), or None after ``timeout`` of silence."""
        self.ws.settimeout(timeout)
        try:
            opcode, frame = self.ws.recv_data_frame(control_frame=True)
        except websocket.WebSocketTimeoutException:
            if time.monotonic() - self.heard > TAIL_SILENCE:
                raise TemporaryError(f"{self.where}: silent for {TAIL_SILENCE:g}s") from None
            return None
        except (websocket.WebSocketException, OSError) as exc:
            cls = TailRefused if opening else TemporaryError
            raise cls(f"{self.where}: {_why(exc)}", delay=2.0) from None
        self.heard = time.monotonic()
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            cls = TailRefused if opening else TemporaryError
            raise cls(f"{self.where}: closed by Loki: {_close_reason(frame.data)}", delay=2.0)
        if opcode not in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            return TailBatch([])  # a ping (answered by the library) or a pong
        try:
            return parse_tail(json.loads(frame.data))
        except (ValueError, KeyError, TypeError, IndexError):
            raise TemporaryError(f"{self.where}: unreadable message", delay=2.0) from None

    def close(self) -> None:
        try:
            self.ws.close(timeout=1)
        except (websocket.WebSocketException, OSError):
            pass  # closing a dead connection: nothing to do


def _connect(endpoint: str, timeout: float) -> socket.socket:
    """A connection to Loki's host, TLS for https with the system's CAs and the host name
    checked (urllib3's default context does the same)."""
    url = urlsplit(endpoint)
    secure = url.scheme == "https"
    host = url.hostname or ""
    sock = socket.create_connection((host, url.port or (443 if secure else 80)), timeout)
    if not secure:
        return sock
    try:
        return ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def parse_tail(data: Mapping[str, Any]) -> TailBatch:
    entries = []
    for stream in data.get("streams") or []:
        labels = dict(stream.get("stream") or {})
        for value in stream.get("values") or []:
            extra = value[2] if len(value) > 2 and isinstance(value[2], Mapping) else {}
            entries.append(Entry({**labels, **extra}, int(value[0]), value[1]))
    entries.sort(key=lambda e: e.ts)
    return TailBatch(entries, len(data.get("dropped_entries") or []))


def _why(exc: BaseException) -> str:
    if isinstance(exc, websocket.WebSocketConnectionClosedException):
        return "connection closed"
    return one_line(exc)


def _close_reason(data: bytes) -> str:
    """A close frame's code and reason (RFC 6455: two bytes of code, then UTF-8)."""
    if len(data) < 2:
        return "no reason given"
    code = int.from_bytes(data[:2], "big")
    return f"{code} {one_line(data[2:].decode('utf-8', 'replace'))}".strip()
