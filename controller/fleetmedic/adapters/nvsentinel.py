"""NVSentinel's ExternalRemediationRequests (ERRs) on the API server: read, watch, and the
one write fleetmedic makes, its own condition in their status.

The calls and their error mapping are :class:`~fleetmedic.adapters.kube.Kube`'s (this
adapter rides on its connection and its ``_call``/``_pages``/``_watch``); what is ERR-specific:

- :meth:`Requests.set_condition` replaces or adds one condition of ``status.conditions``
  and leaves every other as it is. The list has no merge key in NVSentinel's CRD (a write
  replaces it whole), so it is a read-modify-write with the resourceVersion as
  precondition, through the status subresource; a 409 reads again and retries. Nothing
  but ``status.conditions`` is sent, so NVSentinel's fields (its own condition,
  ``completionTime``) are never written by us.
- :meth:`Requests.check_served` finds the ERR from what the API server serves (discovery,
  which every authenticated client may read): the API group changed between NVSentinel's
  design doc (``nvsentinel.nvidia.com``) and its releases (``nvsentinel.dgxc.nvidia.com``),
  so a mismatch is one line naming the group found.
- Events about an ERR go to the ``default`` namespace (it is cluster-scoped), as Node
  events do, so the controller's existing grant covers them.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fleetmedic.adapters.kube import LIST_PAGE, MERGE_PATCH, Kube
from fleetmedic.errors import ConfigError, ConflictError, FleetmedicError, TemporaryError

log = logging.getLogger(__name__)

KIND = "ExternalRemediationRequest"
PLURAL = "externalremediationrequests"


def requests_of(cluster: object, group: str, version: str) -> Requests | None:
    """The ERRs of ``cluster``'s API server; None when it has none (not a Kubernetes
    cluster: the controller's code names no cluster class, only kinds/ and adapters do)."""
    return Requests(cluster, group, version) if isinstance(cluster, Kube) else None


class Requests:
    """The ERRs of one API server (``group``/``version`` as configured)."""

    def __init__(self, kube: Kube, group: str, version: str) -> None:
        self.kube, self.group, self.version = kube, group, version

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    # -- discovery ----------------------------------------------------------------------
    def check_served(self) -> None:
        """ConfigError (one line) unless the API server serves ERRs in our group/version."""
        try:
            found = self._resources(self.group, self.version)
            if any(r.get("name") == PLURAL for r in found.get("resources") or []):
                return
        except FleetmedicError as exc:
            if isinstance(exc, TemporaryError):
                raise
        elsewhere = self._served_elsewhere()
        hint = f"; it is served as {elsewhere}: set nvsentinel.api_group" if elsewhere else ""
        raise ConfigError(
            f"nvsentinel: the API server serves no {PLURAL} in {self.api_version} "
            f"(is NVSentinel's CRD installed?){hint}"
        )

    def _served_elsewhere(self) -> str | None:
        groups = self.kube._call("discover API groups", "GET", "/apis")
        for g in groups.get("groups") or []:
            if "nvsentinel" not in str(g.get("name")):
                continue
            for v in g.get("versions") or []:
                res = self._resources(g["name"], v["version"])
                if any(r.get("name") == PLURAL for r in res.get("resources") or []):
                    return str(v.get("groupVersion"))
        return None

    def _resources(self, group: str, version: str) -> dict:
        return self.kube._call(
            f"discover {group}/{version}",
            "GET",
            "/apis/{group}/{version}",
            params={"group": group, "version": version},
        )

    # -- reading ------------------------------------------------------------------------
    def list_pages(self, page_size: int = LIST_PAGE) -> Iterator[tuple[list[dict], str]]:
        return self.kube._pages(f"list {PLURAL}", self._list_path, page_size, {})

    def watch(self, resource_version: str, timeout: int = 300) -> Iterator[tuple[str, dict]]:
        return self.kube._watch(f"watch {PLURAL}", self._list_path, resource_version, timeout, {})

    @property
    def _list_path(self) -> str:
        """The ERRs' collection path (group and version URL-quoted: they come from the config)."""
        return f"/apis/{quote(self.group, safe='')}/{quote(self.version, safe='')}/{PLURAL}"

    def get(self, name: str) -> dict:
        return self.kube._call(
            f"get {KIND} {name}",
            "GET",
            self._list_path + "/{name}",
            params={"name": name},
        )

    # -- the one write --------------------------------------------------------------------
    def set_condition(self, name: str, condition: Mapping[str, Any], retries: int = 10) -> dict:
        """Put ``condition`` (by its ``type``) into ``status.conditions`` of ERR ``name``,
        keeping every other condition; RV-guarded, retried on conflict. Returns the ERR
        as written. NotFoundError when it is gone."""
        for attempt in range(retries):
            obj = self.get(name)
            conds = [
                c
                for c in ((obj.get("status") or {}).get("conditions") or [])
                if isinstance(c, Mapping)
            ]
            new = [copy.deepcopy(c) for c in conds if c.get("type") != condition["type"]]
            new.append(dict(condition))
            body = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {"conditions": new},
            }
            try:
                return self.kube._call(
                    f"patch {KIND} {name} status",
                    "PATCH",
                    self._list_path + "/{name}/status",
                    params={"name": name},
                    body=body,
                    content_type=MERGE_PATCH,
                )
            except ConflictError:
                time.sleep(min(0.5, 0.01 * 2**attempt) * random.uniform(0.5, 1.5))
        raise TemporaryError(f"{KIND} {name} kept changing under us; gave up after {retries}")

    def post_event(self, obj: Mapping[str, Any], reason: str, message: str, type: str) -> None:
        """A core/v1 Event about the ERR (best effort: never raises)."""
        meta = obj.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "generateName": f"{meta.get('name', 'err')}.fleetmedic.",
                "namespace": "default",
            },
            "involvedObject": {
                "kind": KIND,
                "apiVersion": self.api_version,
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": "fleetmedic"},
            "reportingComponent": "fleetmedic",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create_event("default", body)
        except FleetmedicError as exc:
            log.warning(
                "could not record event %s on %s %s: %s", reason, KIND, meta.get("name"), exc
            )
