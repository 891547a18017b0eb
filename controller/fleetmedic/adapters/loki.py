"""A small client for Loki's HTTP query API (``/loki/api/v1/query_range``).

urllib3 (already here as the Kubernetes client's transport) with a pooled connection;
the two calls a log source needs, nothing more. Every failure is one line: a
:class:`~fleetmedic.errors.TemporaryError` for what may pass (Loki down, restarting,
overloaded: connection refused, timeouts, HTTP 429/5xx), a
:class:`~fleetmedic.errors.ConfigError` for what will not (a bad query: HTTP 400).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from fleetmedic.errors import ConfigError, TemporaryError, one_line


@dataclass(frozen=True)
class Entry:
    labels: Mapping[str, str]  # the stream's labels (and Loki's structured metadata)
    ts: int  # nanoseconds since the epoch
    line: str


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
        self.http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=min(5.0, timeout), read=timeout), retries=False
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
