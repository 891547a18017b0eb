"""A real Loki for tests: the single binary (``-target=all``) on loopback with
filesystem storage.

The binary is built from Go modules by ``scripts/setup.d/32-loki.sh`` (pins in
``tests/loki``) into ``$FLEETMEDIC_CACHE_DIR/loki-bin-<version>-<key>/``, next to the
promtool built from the same module; this module finds them by computing the same key.

    with Loki() as loki:                                   # or the ``loki`` fixture
        loki.push(pod_labels("promtail", node="gpu-1", namespace="train",
                             pod="job-0", container="main"), ["NCCL WARN ..."])
        loki.wait_for('{namespace="train"}', 1)            # -> [Entry(labels, ts, line)]
        with loki.tail('{node_name="gpu-1"}') as t:        # websocket /loki/api/v1/tail
            loki.push(...)
            t.wait_for(1)
        loki.restart()               # SIGTERM, same ports and data dir (ingester WAL)
        loki.restart(kill=True)      # SIGKILL: the WAL replays what was not flushed

What it runs: one process, auth off (tenant ``fake``; ``Loki(tenant=...)``: auth on, and
the harness's own requests carry that tenant), in-memory rings, TSDB index and
chunks under ``<workdir>/data``, ingester WAL on, anonymous usage reporting off, every
listener (HTTP, gRPC, memberlist) on ``host`` with free ports. The ingester is ready at
once (``min_ready_duration: 0s``) instead of Loki's default 15 s, and the query frontend
looks for the query scheduler every second instead of every 10 s, so a start or a
restart is ready in about 3 s instead of 10 s.

Labels: :func:`pod_labels` and :func:`kernel_labels` give the label sets common log
shippers attach (see :data:`SHIPPERS`), so a log source is tested against what it will
meet, not against labels of our own invention.

Run ``python -m tests.harness.loki`` for a Loki in the foreground (prints its URL).
"""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from tests.harness import procs

LOKI_SRC = procs.ROOT / "tests" / "loki"
# Keep in sync with scripts/setup.d/32-loki.sh: the files that define the build.
KEY_FILES = ("go.mod", "go.sum", "build.flags")


class LokiError(RuntimeError):
    """The test Loki could not be found, started or queried. One line."""


# ---------------------------------------------------------------------------
# What log shippers label lines with. A pod's log and a node's kernel log carry
# different labels; the node is named by a different label in each family.
@dataclass(frozen=True)
class Shipper:
    """Label names one family of log shippers uses (``None``: not set by it)."""

    name: str
    node: str  # the node the line came from
    namespace: str
    pod: str
    container: str
    stream: str | None  # stdout/stderr
    job: str | None  # the job label of pod logs, a format of namespace and app
    kernel_job: dict[str, str]  # what marks a node's kernel log stream


SHIPPERS: dict[str, Shipper] = {
    # Promtail's Kubernetes pod scrape config (Helm chart defaults; the cri stage adds
    # `stream`), and Grafana Alloy configs that keep Promtail's label names.
    "promtail": Shipper(
        name="promtail",
        node="node_name",
        namespace="namespace",
        pod="pod",
        container="container",
        stream="stream",
        job="{namespace}/{app}",
        kernel_job={"job": "systemd-journal", "transport": "kernel"},
    ),
    # Fluent Bit's Loki output with the kubernetes filter: the node is `host`.
    "fluent-bit": Shipper(
        name="fluent-bit",
        node="host",
        namespace="namespace",
        pod="pod",
        container="container",
        stream="stream",
        job="fluent-bit",
        kernel_job={"job": "fluent-bit", "source": "kmsg"},
    ),
    # The OpenTelemetry Collector's k8sattributes processor through Loki's OTLP label
    # translation (dots become underscores). Konduktor queries these: its dmesg
    # DaemonSet's lines are selected by k8s_daemonset_name="dmesg".
    "otel": Shipper(
        name="otel",
        node="k8s_node_name",
        namespace="k8s_namespace_name",
        pod="k8s_pod_name",
        container="k8s_container_name",
        stream=None,
        job=None,
        kernel_job={"k8s_daemonset_name": "dmesg", "k8s_namespace_name": "kube-system"},
    ),
}


def pod_labels(
    shipper: str,
    *,
    node: str,
    namespace: str,
    pod: str,
    container: str,
    stream: str = "stderr",
    app: str | None = None,
) -> dict[str, str]:
    """The labels ``shipper`` puts on a container's log lines."""
    s = SHIPPERS[shipper]
    labels = {s.node: node, s.namespace: namespace, s.pod: pod, s.container: container}
    if s.stream:
        labels[s.stream] = stream
    if s.job:
        labels["job"] = s.job.format(namespace=namespace, app=app or container)
    return labels


def kernel_labels(shipper: str, *, node: str) -> dict[str, str]:
    """The labels ``shipper`` puts on a node's kernel log (dmesg, kmsg or journal)."""
    s = SHIPPERS[shipper]
    return {**s.kernel_job, s.node: node}


# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Binaries:
    dir: Path
    loki: Path
    promtool: Path
    versions: dict[str, str]


def build_key() -> str:
    return procs.cache_key(LOKI_SRC, KEY_FILES)


def find_binaries() -> Binaries:
    """The built Loki and promtool for the current pins, or LokiError saying how to
    build them. ``FLEETMEDIC_LOKI_BIN`` overrides the directory (refused under CI=true)."""
    version = procs.pinned(LOKI_SRC / "go.mod", "github.com/grafana/loki/v3")
    d = procs.built_dir(
        "FLEETMEDIC_LOKI_BIN",
        f"loki-bin-{version}-{build_key()}",
        ("loki", "promtool"),
        LokiError,
        "bash scripts/setup.d/32-loki.sh",
    )
    return Binaries(d, d / "loki", d / "promtool", procs.read_versions(d))


class Entry(NamedTuple):
    """One log line as Loki returns it."""

    labels: dict[str, str]
    ts: int  # nanoseconds since the epoch
    line: str


def now_ns() -> int:
    return time.time_ns()


def _entries(result: Iterable[Mapping[str, Any]]) -> list[Entry]:
    out = []
    for s in result:
        for v in s.get("values", ()):
            out.append(Entry(dict(s.get("stream", {})), int(v[0]), v[1]))
    return out


# ---------------------------------------------------------------------------
def loki_config(loki: Loki) -> dict[str, Any]:
    """Loki's configuration, in one place, with the reason for each choice."""
    data = str(loki.data_dir)
    return {
        # One tenant ("fake"), as in a cluster without a gateway; with ``tenant`` set,
        # multi-tenant: every request must name its tenant (X-Scope-OrgID).
        "auth_enabled": loki.tenant is not None,
        "server": {
            "http_listen_address": loki.host,
            "http_listen_port": loki.port,
            "grpc_listen_address": loki.host,
            "grpc_listen_port": loki.grpc_port,
            "log_level": "info",
            # Stop promptly on SIGTERM (default 30 s).
            "graceful_shutdown_timeout": "5s",
            **({"http_tls_config": loki._write_tls()} if loki.tls else {}),
        },
        "common": {
            "instance_addr": loki.host,
            "path_prefix": data,  # WAL, compactor, rules: all under the data dir
            "storage": {
                "filesystem": {
                    "chunks_directory": f"{data}/chunks",
                    "rules_directory": f"{data}/rules",
                }
            },
            "replication_factor": 1,
            "ring": {"kvstore": {"store": "inmemory"}},
        },
        # Unused with in-memory rings, but never on the shared default port 7946.
        "memberlist": {"bind_addr": [loki.host], "bind_port": loki.memberlist_port},
        "ingester": {
            "wal": {"enabled": True},
            "lifecycler": {
                # Ready at once instead of after 15 s; no pause on shutdown.
                "min_ready_duration": "0s",
                "final_sleep": "0s",
            },
        },
        "schema_config": {
            "configs": [
                {
                    "from": "2020-10-24",
                    "store": "tsdb",
                    "object_store": "filesystem",
                    "schema": "v13",
                    "index": {"prefix": "index_", "period": "24h"},
                }
            ]
        },
        "limits_config": {
            # Tests push lines stamped now; keep Loki's rejection of old lines on, but
            # let tests backfill up to a week (Loki's default).
            "reject_old_samples": True,
            "reject_old_samples_max_age": "168h",
            **loki.limits,
        },
        # /ready waits for the query frontend to reach the query scheduler, which it looks
        # up in the scheduler ring every 10 s by default (the scheduler joins about 3 s
        # after the start): every start and restart then took 10 s. Look every second.
        "frontend": {"scheduler_dns_lookup_period": "1s"},
        "query_range": {
            # The results cache would serve a range query from before a restart
            # unchanged; tests want what the store holds now.
            "cache_results": False,
        },
        # No phoning home from test runs.
        "analytics": {"reporting_enabled": False},
    }


class Loki:
    """One Loki process in ``workdir``. ``start()`` / ``stop()`` / ``restart()``."""

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        limits: Mapping[str, Any] | None = None,
        start_timeout: float = 60.0,
        binaries: Binaries | None = None,
        tenant: str | None = None,
        tls: bool = False,
    ) -> None:
        self.bin = binaries or find_binaries()
        self.tenant = tenant  # set: auth on, and this harness's own requests name it
        self.tls = tls  # HTTPS (and wss) with a certificate of a test CA (``ca_file``)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fleetmedic-loki-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.limits = dict(limits or {})
        self.start_timeout = start_timeout
        self.port = 0
        self.grpc_port = 0
        self.memberlist_port = 0
        self.proc = None
        self.spawned: list[int] = []
        self.starts = 0
        self.start_seconds: float | None = None

    # -- lifecycle ----------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the HTTPS certificate (``tls=True``): SSL_CERT_FILE for clients."""
        return self.workdir / "tls" / "ca.pem"

    def _write_tls(self) -> dict[str, str]:
        """A server certificate for ``host`` (IP and name) from a CA of its own, once."""
        d = self.workdir / "tls"
        if not (d / "server.pem").exists():
            import ipaddress

            from cryptography import x509

            from tests.harness import pki

            d.mkdir(parents=True, exist_ok=True)
            ca = pki.Ca("fleetmedic-test-loki-ca")
            crt, key = ca.issue(
                "loki",
                server=True,
                sans=[x509.IPAddress(ipaddress.ip_address(self.host)), x509.DNSName("localhost")],
            )
            (d / "ca.pem").write_bytes(ca.cert_pem)
            (d / "server.pem").write_bytes(crt)
            pki.write_private(d / "server.key", key)
        return {"cert_file": str(d / "server.pem"), "key_file": str(d / "server.key")}

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def config_file(self) -> Path:
        return self.workdir / "loki.yaml"

    @property
    def log(self) -> Path:
        return self.workdir / "loki.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def __enter__(self) -> Loki:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Loki:
        """Start Loki and wait until ``/ready`` answers 200. Ports are chosen on the
        first start and kept by restarts, so clients keep their URL."""
        if self.pid:
            return self
        t0 = time.monotonic()
        first = not self.port
        for attempt in range(3):  # a free port we picked may be taken meanwhile
            if first:
                self.port = procs.free_port(self.host)
                self.grpc_port = procs.free_port(self.host)
                self.memberlist_port = procs.free_port(self.host)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.config_file.write_text(yaml.safe_dump(loki_config(self), sort_keys=False))
            self.proc = procs.spawn(
                [str(self.bin.loki), f"-config.file={self.config_file}", "-target=all"],
                self.log,
                cwd=self.workdir,
            )
            self.spawned.append(self.proc.pid)
            self.starts += 1
            try:
                self._wait_ready(t0)
                break
            except LokiError:
                in_use = "address already in use" in self.log.read_text(errors="replace")
                procs.stop(self.proc)
                self.proc = None
                if not (first and in_use and attempt < 2):
                    raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            rc = self.proc.poll() if self.proc else -1
            if rc is not None:
                raise LokiError(
                    f"loki exited with code {rc} during start: "
                    f"{procs.last_line(self.log, 'level=error')} (log: {self.log})"
                )
            try:
                status, body = self._http("GET", "/ready", timeout=2)
                if status == 200:
                    return
                last = f"ready {status}: {body.decode(errors='replace').strip()[:200]}"
            except OSError as exc:
                last = type(exc).__name__
            time.sleep(0.2)
        raise LokiError(f"loki not ready after {self.start_timeout:.0f}s ({last}); log: {self.log}")

    def stop(self, keep_data: bool = False, *, kill: bool = False) -> None:
        """Stop Loki (SIGTERM, or SIGKILL with ``kill``). The workdir is removed unless
        ``keep_data`` (then ``start()`` brings the same Loki back)."""
        procs.stop(self.proc, timeout=20, sig=signal.SIGKILL if kill else signal.SIGTERM)
        self.proc = None
        if not keep_data:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL Loki, keeping its data (a crash: unflushed lines live in the WAL)."""
        self.stop(keep_data=True, kill=True)

    def restart(self, *, kill: bool = False) -> float:
        """Stop Loki (SIGTERM, or SIGKILL with ``kill``) and start it again on the same
        ports and data dir; wait until ready. Returns the seconds it was away."""
        t0 = time.monotonic()
        self.stop(keep_data=True, kill=kill)
        self.start()
        return time.monotonic() - t0

    def rss(self) -> int:
        return procs.rss(self.pid) if self.pid else 0

    # -- HTTP API -------------------------------------------------------------
    def _http(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, bytes]:
        sent = dict(headers or {})
        if self.tenant is not None:
            sent.setdefault("X-Scope-OrgID", self.tenant)
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=sent)
        ctx = ssl.create_default_context(cafile=str(self.ca_file)) if self.tls else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _get_json(self, path: str, params: Mapping[str, Any], timeout: float = 30) -> dict:
        q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        status, body = self._http("GET", f"{path}?{q}", timeout=timeout)
        if status != 200:
            raise LokiError(f"GET {path}: HTTP {status}: {body.decode(errors='replace')[:300]}")
        return json.loads(body)

    def push(
        self,
        labels: Mapping[str, str],
        lines: Sequence[str] | Sequence[tuple[int, str]],
        *,
        ts: int | None = None,
    ) -> list[int]:
        """Push ``lines`` as one stream with ``labels`` through ``/loki/api/v1/push``
        (JSON), as a shipper does. Lines may be strings (stamped ``ts`` or now, 1 ns
        apart to keep their order) or ``(ts_ns, line)`` pairs. Returns the stamps."""
        base = ts if ts is not None else now_ns()
        values = []
        for i, item in enumerate(lines):
            stamp, text = item if isinstance(item, tuple) else (base + i, item)
            values.append([str(stamp), text])
        self.push_streams([{"stream": dict(labels), "values": values}])
        return [int(v[0]) for v in values]

    def push_streams(self, streams: Sequence[Mapping[str, Any]]) -> None:
        """Push raw streams (``[{"stream": {...}, "values": [[ts, line], ...]}]``)."""
        body = json.dumps({"streams": list(streams)}).encode()
        status, resp = self._http(
            "POST",
            "/loki/api/v1/push",
            body,
            headers={"Content-Type": "application/json"},
        )
        if status not in (200, 204):
            raise LokiError(f"push: HTTP {status}: {resp.decode(errors='replace')[:300]}")

    def query_range(
        self,
        query: str,
        *,
        start: int | None = None,
        end: int | None = None,
        limit: int = 5000,
        direction: str = "forward",
    ) -> list[Entry]:
        """``/loki/api/v1/query_range`` for a log query; entries oldest first (with
        ``direction="forward"``). ``start`` defaults to an hour ago, ``end`` to now."""
        end = end if end is not None else now_ns() + 1
        start = start if start is not None else end - 3600 * 10**9
        data = self._get_json(
            "/loki/api/v1/query_range",
            {"query": query, "start": start, "end": end, "limit": limit, "direction": direction},
        )["data"]
        if data.get("resultType") != "streams":
            raise LokiError(f"query_range {query!r}: not a log query ({data.get('resultType')})")
        entries = _entries(data["result"])
        entries.sort(key=lambda e: e.ts, reverse=direction == "backward")
        return entries

    def wait_for(self, query: str, count: int, timeout: float = 15.0, **kwargs: Any) -> list[Entry]:
        """Poll :meth:`query_range` until it returns at least ``count`` entries."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.query_range(query, **kwargs)
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise LokiError(
                    f"{query}: {len(got)} of {count} lines after {timeout:.0f}s; log: {self.log}"
                )
            time.sleep(0.1)

    def labels(self) -> list[str]:
        return self._get_json("/loki/api/v1/labels", {}).get("data") or []

    def label_values(self, name: str) -> list[str]:
        path = f"/loki/api/v1/label/{urllib.parse.quote(name)}/values"
        return self._get_json(path, {}).get("data") or []

    def metrics(self) -> str:
        status, body = self._http("GET", "/metrics")
        if status != 200:
            raise LokiError(f"GET /metrics: HTTP {status}")
        return body.decode()

    def tail_url(self, query: str, start: int | None = None, limit: int | None = None) -> str:
        q = {"query": query, "start": start, "limit": limit}
        qs = urllib.parse.urlencode({k: v for k, v in q.items() if v is not None})
        return f"{'wss' if self.tls else 'ws'}://{self.host}:{self.port}/loki/api/v1/tail?{qs}"

    def tail(self, query: str, *, start: int | None = None, timeout: float = 10.0) -> Tail:
        """A websocket on ``/loki/api/v1/tail`` (a context manager). ``start``
        (ns) replays lines from then on first; Loki's default is an hour ago."""
        return Tail(self.tail_url(query, start), timeout)


class Tail:
    """A live tail. ``wait_for(n)`` collects entries until it has ``n``; every
    entry received so far is in ``entries`` and dropped ones in ``dropped``."""

    def __init__(self, url: str, timeout: float) -> None:
        import websocket  # websocket-client

        self.url = url
        self.ws = websocket.create_connection(url, timeout=timeout)
        self.entries: list[Entry] = []
        self.dropped: list[dict] = []
        self._await_first_frame(timeout)

    def _await_first_frame(self, timeout: float) -> None:
        """Return once Loki follows the query. Loki registers the tail with its
        ingesters only after the websocket handshake, and its replay ends at the
        handshake's time, so a line pushed in between would be in neither. Its first
        frame (a batch, or the ping it sends every second once following) closes that
        window; the product's tail (fleetmedic.adapters.loki.Tail) waits the same way."""
        import websocket

        self.ws.settimeout(timeout)
        try:
            opcode, frame = self.ws.recv_data_frame(control_frame=True)
        except websocket.WebSocketTimeoutException as exc:
            raise LokiError(f"tail: no frame from Loki within {timeout:g}s") from exc
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            raise LokiError(f"tail closed by Loki at once: {self.url}")
        if opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            self._take(frame.data)

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.ws.close()

    def recv(self, timeout: float) -> list[Entry]:
        """The entries of the next message (empty if none came within ``timeout``)."""
        import websocket

        self.ws.settimeout(timeout)
        try:
            msg = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            return []
        except websocket.WebSocketConnectionClosedException as exc:
            raise LokiError(f"tail closed by Loki: {self.url}") from exc
        return self._take(msg) if msg else []

    def _take(self, msg: str | bytes) -> list[Entry]:
        data = json.loads(msg)
        self.dropped.extend(data.get("dropped_entries") or [])
        got = _entries(data.get("streams") or [])
        self.entries.extend(got)
        return got

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Entry]:
        deadline = time.monotonic() + timeout
        while len(self.entries) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LokiError(f"tail: {len(self.entries)} of {count} lines after {timeout:.0f}s")
            self.recv(min(left, 1.0))
        return list(self.entries)


def main() -> None:  # pragma: no cover - manual use
    with Loki() as loki:
        print(
            f"loki {loki.bin.versions.get('loki', '?')} ready in {loki.start_seconds:.1f}s: "
            f"LOG_ENDPOINT={loki.url} (data in {loki.data_dir})",
            flush=True,
        )
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
