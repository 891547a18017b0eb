"""Thin Kubernetes adapter that speaks plain JSON dicts.

Every caller here wants the API's own JSON shape (so pure code can work on it and
tests can build it by hand), so each call sends its path through kubernetes-client's
``ApiClient`` (which keeps the kubeconfig's server, TLS and credentials) and decodes
the raw response itself. The generated ``CoreV1Api`` and friends are not used:
importing them builds some 300 pydantic models we never read, 0.75 s of CPU in every
process that connects (measured on kubernetes-client 37).
Third-party errors are mapped into :mod:`fleetmedic.errors` at this boundary:

=========================  =====================================
HTTP / transport            fleetmedic error
=========================  =====================================
404                        NotFoundError
409                        ConflictError (re-read and retry)
410                        Expired (list again)
401, 403                   ForbiddenError (a PermanentError)
400, 422                   PermanentError
429                        TooManyRequests (a TemporaryError; on an
                           eviction: a PodDisruptionBudget said no)
5xx, connection            TemporaryError
=========================  =====================================

Every request carries ``_request_timeout``: a hung API server must never hang
the controller or the agent.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from fleetmedic.errors import (
    ConfigError,
    ConflictError,
    Expired,
    FleetmedicError,
    ForbiddenError,
    NotFoundError,
    PermanentError,
    TemporaryError,
    TooManyRequests,
)
from fleetmedic.model.nodeedit import merge_patch

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 15.0  # seconds for any non-watch call
LIST_PAGE = 100
"""Objects per list page. Smaller than client-go's 500: a decoded page is garbage the
moment its views are made, but its objects sit between the views in the allocator's
pools, and freed pools between live objects stay resident. At 100 a 5,000-node relist
left 6 MB resident against 12 MB at 500 (and four clusters at once 25 MB against 50);
the cost is 50 list requests instead of 10, only when (re)listing."""
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# the API paths called (``{name}`` placeholders: Kube._send fills and URL-quotes them)
NODE = "/api/v1/nodes/{name}"
POD = "/api/v1/namespaces/{namespace}/pods/{name}"
CONFIG_MAP = "/api/v1/namespaces/{namespace}/configmaps/{name}"
EVENTS = "/api/v1/namespaces/{namespace}/events"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def _error_from(status: int | None, reason: str, body: str | None, what: str) -> FleetmedicError:
    detail = reason or ""
    try:
        detail = json.loads(body or "").get("message") or detail
    except (ValueError, AttributeError):
        pass
    msg = f"{what}: HTTP {status} {detail}".strip()
    if status == 404:
        return NotFoundError(msg)
    if status == 409:
        return ConflictError(msg, delay=0.05)
    if status == 410:
        return Expired(msg, delay=0)
    if status in (401, 403):
        return ForbiddenError(msg)
    if status in (400, 422):
        return PermanentError(msg)
    if status == 429:
        return TooManyRequests(msg, delay=5.0)
    return TemporaryError(msg, delay=2.0)


class Kube:
    """A connection to one API server. Create it with :func:`connect`."""

    def __init__(self, api_client: client.ApiClient, server: str) -> None:
        self.api_client = api_client
        self.server = server

    @property
    def pods(self) -> Kube:
        """The pod calls below: a capability only Kubernetes has (adapters/cluster.py)."""
        return self

    # -- plumbing ---------------------------------------------------------
    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Any = REQUEST_TIMEOUT,
    ) -> Any:
        """One request; ``path`` is the API's, with ``{name}`` placeholders filled from
        ``params`` (URL-quoted). Returns kubernetes-client's RESTResponse, body unread."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params=params,
            query_params=[(k, v) for k, v in (query or {}).items() if v not in (None, "")],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api_client.call_api(*request, _request_timeout=timeout)

    def _call(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        """:meth:`_send` for the response's JSON; every failure mapped into our errors."""
        try:
            resp = self._send(method, path, **kwargs)
            data = resp.read()
        except ApiException as exc:
            raise _error_from(exc.status, exc.reason or "", exc.body, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TemporaryError(
                f"{what}: API server {self.server} unreachable: {type(exc).__name__}", delay=2.0
            ) from None
        if not 200 <= resp.status <= 299:
            raise _error_from(resp.status, resp.reason or "", data.decode(errors="replace"), what)
        return json.loads(data) if data else {}

    # -- nodes ------------------------------------------------------------
    def list_nodes(self, label_selector: str | None = None) -> tuple[list[dict], str]:
        """All nodes (matching ``label_selector``) and the list's resourceVersion."""
        items: list[dict] = []
        rv = ""
        for page, rv in self.list_node_pages(label_selector):  # noqa: B007 (the last page's rv)
            items.extend(page)
        return items, rv

    def list_node_pages(
        self, label_selector: str | None = None, page_size: int = LIST_PAGE
    ) -> Iterator[tuple[list[dict], str]]:
        """Nodes a page at a time, each with the list's resourceVersion.

        Every page comes from the same snapshot (``continue``), so any page's
        resourceVersion is the list's. Paging keeps a 5,000-node fleet from being
        one 20 MB response parsed at once, which would set the controller's
        memory high-water mark (see LIST_PAGE). A continue token that expired is 410:
        Expired.
        """
        selectors = {"labelSelector": label_selector}
        return self._pages("list nodes", "/api/v1/nodes", page_size, selectors)

    def _pages(
        self, what: str, path: str, page_size: int, selectors: Mapping[str, str | None]
    ) -> Iterator[tuple[list[dict], str]]:
        """One list call's pages, following ``continue`` until the last.

        Only the page handed out is held: it is taken out of the decoded body, so once the
        caller lets go of it (before asking for the next) no two pages are alive at once.
        """
        token = None
        while True:
            query = {"limit": page_size, "continue": token, **selectors}
            body = self._call(what, "GET", path, query=query)
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            yield body.pop("items", None) or [], meta.get("resourceVersion", "")
            if not token:
                return

    def get_node(self, name: str) -> dict:
        return self._call(f"get node {name}", "GET", NODE, params={"name": name})

    def delete_node(self, name: str, uid: str) -> bool:
        """Delete the Node ``name`` if it is still the object ``uid`` (a precondition: a new
        Node of the same name is never deleted). False when it was gone already."""
        try:
            self._call(
                f"delete node {name}",
                "DELETE",
                NODE,
                params={"name": name},
                body={"preconditions": {"uid": uid}},
            )
        except NotFoundError:
            return False
        return True

    def watch_nodes(
        self, resource_version: str, timeout: int = 300, label_selector: str | None = None
    ) -> Iterator[tuple[str, dict]]:
        """Yield ``(type, node)`` from a watch with bookmarks until ``timeout``.

        Types are ADDED, MODIFIED, DELETED and BOOKMARK. Raises :class:`Expired`
        when the server says the resourceVersion is gone (list again then).
        """
        selectors = {"labelSelector": label_selector}
        return self._watch("watch nodes", "/api/v1/nodes", resource_version, timeout, selectors)

    def _watch(
        self,
        what: str,
        path: str,
        resource_version: str,
        timeout: int,
        selectors: Mapping[str, str | None],
    ) -> Iterator[tuple[str, dict]]:
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout,
            **selectors,
        }
        try:
            sent = self._send("GET", path, query=query, timeout=(REQUEST_TIMEOUT, timeout + 15))
            resp: urllib3.BaseHTTPResponse = sent.response  # read line by line below
        except ApiException as exc:
            raise _error_from(exc.status, exc.reason or "", exc.body, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TemporaryError(
                f"{what}: API server {self.server} unreachable: {type(exc).__name__}"
            ) from None
        if not 200 <= resp.status <= 299:
            raise _error_from(
                resp.status, resp.reason or "", resp.data.decode(errors="replace"), what
            )
        try:
            for line in _lines(resp):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise _error_from(obj.get("code"), obj.get("reason", ""), json.dumps(obj), what)
                yield event["type"], obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # A dropped stream is normal (API server restart, timeout): the
            # caller resumes from its last resourceVersion.
            log.debug("%s: stream ended: %s", what, exc)
        finally:
            resp.release_conn()

    def update_node(
        self, name: str, mutate: Callable[[dict], bool | None], retries: int = 20
    ) -> dict:
        """Read-modify-write a node, guarded by its resourceVersion.

        ``mutate`` edits a deep copy in place (see :mod:`fleetmedic.model.nodeedit`)
        and returns False to skip the write. On 409 the node is read again and
        ``mutate`` runs again on the fresh copy, so concurrent writers (other
        taints, kubelet status) never lose updates.
        """
        for attempt in range(retries):
            node = self.get_node(name)
            new = copy.deepcopy(node)
            if mutate(new) is False:
                return node
            patch = merge_patch(node, new)
            if not patch:
                return node
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"][
                "resourceVersion"
            ]
            try:
                return self._call(
                    f"patch node {name}",
                    "PATCH",
                    NODE,
                    params={"name": name},
                    body=patch,
                    content_type=MERGE_PATCH,
                )
            except ConflictError:
                time.sleep(min(0.5, 0.01 * 2**attempt) * random.uniform(0.5, 1.5))
        raise TemporaryError(
            f"node {name} kept changing under us; gave up after {retries} conflicts"
        )

    def set_node_condition(self, name: str, condition: dict) -> dict:
        """Set one NodeCondition (by ``type``) through the status subresource.

        A strategic merge patch merges ``status.conditions`` by type, as the kubelet's own
        and node-problem-detector's writes do, so no one else's condition is touched and no
        read-modify-write (nor resourceVersion) is needed.
        """
        return self._call(
            f"patch node {name} status",
            "PATCH",
            NODE + "/status",
            params={"name": name},
            body={"status": {"conditions": [condition]}},
            content_type=STRATEGIC_PATCH,
        )

    # -- pods and eviction (drain) ----------------------------------------
    # One LIST and one WATCH per drain, both narrowed to the node by a field selector:
    # the cost stays flat however many pods the node runs (kubectl GETs each pod).
    def list_pods_on_node(self, node_name: str) -> tuple[list[dict], str]:
        """The pods bound to ``node_name`` (all namespaces) and the list's resourceVersion."""
        body = self._call(
            f"list pods on {node_name}",
            "GET",
            "/api/v1/pods",
            query={"fieldSelector": f"spec.nodeName={node_name}"},
        )
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    def watch_pods_on_node(
        self, node_name: str, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict]]:
        """As :meth:`watch_nodes`, for the pods bound to ``node_name``."""
        return self._watch(
            f"watch pods on {node_name}",
            "/api/v1/pods",
            resource_version,
            timeout,
            {"fieldSelector": f"spec.nodeName={node_name}"},
        )

    # The sweeper's pod informer (controller/podwatch.py): one paged LIST and one WATCH for
    # the whole fleet, narrowed by a field selector (e.g. bound, unfinished pods), so
    # knowing which nodes are idle costs the same at 5 nodes and at 5,000.
    def list_pod_pages(
        self, field_selector: str, page_size: int = LIST_PAGE
    ) -> Iterator[tuple[list[dict], str]]:
        """Pods (all namespaces) matching ``field_selector``, a page at a time, each with
        the list's resourceVersion (as :meth:`list_node_pages`)."""
        selectors = {"fieldSelector": field_selector}
        return self._pages("list pods", "/api/v1/pods", page_size, selectors)

    def watch_pods(
        self, field_selector: str, resource_version: str, timeout: int = 300
    ) -> Iterator[tuple[str, dict]]:
        """As :meth:`watch_nodes`, for the pods matching ``field_selector``."""
        return self._watch(
            "watch pods",
            "/api/v1/pods",
            resource_version,
            timeout,
            {"fieldSelector": field_selector},
        )

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Evict through the Eviction API, with ``grace_seconds`` as the termination grace
        (None: the pod's own). A PDB that forbids it raises :class:`TooManyRequests`;
        a pod already gone counts as evicted."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_seconds}
        try:
            self._call(
                f"evict pod {namespace}/{name}",
                "POST",
                POD + "/eviction",
                params={"namespace": namespace, "name": name},
                body=body,
            )
        except NotFoundError:
            pass

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete without asking PDBs (the drain's ``force`` mode); a pod already gone
        counts as deleted."""
        try:
            self._call(
                f"delete pod {namespace}/{name}",
                "DELETE",
                POD,
                params={"namespace": namespace, "name": name},
                query={"gracePeriodSeconds": grace_seconds},
            )
        except NotFoundError:
            pass

    # -- leases -----------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict:
        return self._call(
            f"get lease {namespace}/{name}",
            "GET",
            LEASES + "/{name}",
            params={"namespace": namespace, "name": name},
        )

    def create_lease(self, namespace: str, body: dict) -> dict:
        return self._call(
            f"create lease {namespace}/{body['metadata']['name']}",
            "POST",
            LEASES,
            params={"namespace": namespace},
            body=body,
        )

    def replace_lease(self, namespace: str, body: dict) -> dict:
        """Replace guarded by body.metadata.resourceVersion (409 if it moved)."""
        return self._call(
            f"update lease {namespace}/{body['metadata']['name']}",
            "PUT",
            LEASES + "/{name}",
            params={"namespace": namespace, "name": body["metadata"]["name"]},
            body=body,
        )

    # -- config maps (pause switch) ---------------------------------------
    def get_config_map(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call(
                f"get configmap {namespace}/{name}",
                "GET",
                CONFIG_MAP,
                params={"namespace": namespace, "name": name},
            )
        except NotFoundError:
            return None

    def patch_config_map_data(
        self,
        namespace: str,
        name: str,
        data: dict[str, str | None],
        resource_version: str | None = None,
    ) -> dict:
        """Merge ``data`` into an existing ConfigMap (a None value removes the key); with
        ``resource_version``, only if the ConfigMap has not changed since (else 409,
        :class:`~fleetmedic.errors.ConflictError`).

        The ConfigMap is never created here: the shipped RBAC grants ``patch`` on one
        named ConfigMap only (``create`` cannot be limited by name), and
        deploy/controller ships it. A missing one is NotFoundError.
        """
        return self._call(
            f"patch configmap {namespace}/{name}",
            "PATCH",
            CONFIG_MAP,
            params={"namespace": namespace, "name": name},
            body={
                "data": data,
                **({"metadata": {"resourceVersion": resource_version}} if resource_version else {}),
            },
            content_type=MERGE_PATCH,
        )

    # -- events -----------------------------------------------------------
    def list_node_events(self, name: str) -> list[dict]:
        """The core/v1 Events about Node ``name`` (fleetmedic posts them in ``default``)."""
        resp = self._call(
            f"list events of node {name}",
            "GET",
            EVENTS,
            params={"namespace": "default"},
            query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={name}"},
        )
        return list(resp.get("items") or [])

    def post_event(
        self,
        node: dict,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "fleetmedic",
    ) -> None:
        """Record a core/v1 Event on the Node. Never raises: events are best effort."""
        meta = node.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "generateName": f"{meta.get('name', 'node')}.fleetmedic.",
                "namespace": "default",
            },
            "involvedObject": {
                "kind": "Node",
                "apiVersion": "v1",
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.create_event("default", body)
        except FleetmedicError as exc:
            log.warning("could not record event %s on %s: %s", reason, meta.get("name"), exc)

    def create_event(self, namespace: str, body: dict) -> dict:
        return self._call("post event", "POST", EVENTS, params={"namespace": namespace}, body=body)


def _lines(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    buf = b""
    for chunk in resp.stream(amt=65536, decode_content=True):
        buf += chunk
        *complete, buf = buf.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buf.strip():
        yield buf


def connect(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
) -> Kube:
    """Connect with a kubeconfig file (or in-cluster credentials).

    Raises :class:`ConfigError` with a one-line message when the kubeconfig is
    missing or malformed. Reachability is checked on first use, not here.
    """
    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        where = (
            "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig or '~/.kube/config'}"
        )
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where}: {first}") from None
    except Exception as exc:  # yaml errors and the like; still one line
        raise ConfigError(
            f"kubeconfig {kubeconfig}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    cfg.retries = False  # we retry ourselves, with our own error mapping
    return Kube(client.ApiClient(cfg), cfg.host)
