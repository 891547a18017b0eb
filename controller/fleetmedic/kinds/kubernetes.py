"""The Kubernetes kind: Nodes, Leases, ConfigMaps, Events and pods of one API server
(adapters/kube.py), drained as ``kubectl drain`` does (kinds/kubedrain.py), rebooted by the
reboot playbook over SSH. Its Cluster, with the verbs, is kinds/kubecluster.py (imported
when connecting: the kubernetes client takes a second to import, which ``--help`` and
``config check`` need not pay).

- connect: ``--kubeconfig``, else the config's ``kube.kubeconfig`` (or its systemd
  credential), else in-cluster credentials in a Pod, else ``$KUBECONFIG`` or
  ``~/.kube/config``; a kubeconfig that was named must exist (one line if not);
- node-side writers: one connection per thread, so a slow check round never delays a
  fencing write;
- preflight and start-up preparation: nothing beyond the shared checks (deploy/controller
  ships the pause ConfigMap and the RBAC);
- the verbs: drain (cordon, evict PDB-aware, wait for the pods to be gone), settle (an
  API server's answer is durable: no wait), reboot (None: the playbook does it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetmedic import clikit
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.errors import ConfigError
from fleetmedic.model import config as configmod
from fleetmedic.model.config import Config

if TYPE_CHECKING:
    from fleetmedic.kinds.kubecluster import KubernetesCluster


def in_pod(kubeconfig: str | None) -> bool:
    """Use the Pod's ServiceAccount: no kubeconfig named, none in the environment, and
    Kubernetes' service variables set (what in-cluster clients look for)."""
    return (
        kubeconfig is None
        and "KUBECONFIG" not in os.environ
        and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )


def _connect(kubeconfig: str | None, context: str | None, in_cluster: bool) -> KubernetesCluster:
    from fleetmedic.adapters import kube
    from fleetmedic.kinds.kubecluster import KubernetesCluster

    made = kube.connect(kubeconfig, context, in_cluster=in_cluster)
    return KubernetesCluster(made.api_client, made.server)


class _Kubernetes:
    name = "kubernetes"
    server_title = "API server"

    def connect(self, cfg: Config, kubeconfig: str | None) -> Cluster:
        if kubeconfig:
            clikit.require_kubeconfig(kubeconfig, "--kubeconfig")
            return _connect(kubeconfig, cfg.kube.context, False)
        path = configmod.secret_path(cfg.kube.kubeconfig, cfg.kube.kubeconfig_credential)
        if path is not None:
            clikit.require_kubeconfig(path, "kube.kubeconfig in the config")
        if (
            path is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and not os.environ.get("KUBECONFIG")
        ):
            return _connect(None, None, True)
        if path is None:
            clikit.require_kubeconfig(None, "KUBECONFIG")
        return _connect(str(path) if path else None, cfg.kube.context, False)

    def node_docs(
        self, side: Any, vocab: Any, named_by: str, one_node: bool, lasting: bool
    ) -> Callable[[], NodeDocs]:
        if one_node:
            why = clikit.check_node_name(side.node_name)
            if why:
                raise ConfigError(f"node name {why}")
        from fleetmedic.adapters import kube

        in_cluster = in_pod(side.kubeconfig)
        if not in_cluster:
            clikit.require_kubeconfig(side.kubeconfig, named_by)
        return lambda: kube.connect(side.kubeconfig, in_cluster=in_cluster)

    def preflight(self, cfg: Config) -> tuple[list[str], list[Path]]:
        return [], []

    def prepare(self, cluster: Cluster, cfg: Config, identity: str) -> dict[str, Any]:
        return {}  # (the API server's Leases: nothing to add)

    def claims(self, side: Any) -> bool:
        return False  # (the default: kinds/__init__.py NODE_SIDE_DEFAULT)

    def answers(self, docs: NodeDocs) -> bool:
        from fleetmedic.adapters.kube import Kube

        return isinstance(docs, Kube)


KIND = _Kubernetes()
