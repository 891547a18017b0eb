"""The Kubernetes kind's Cluster (kinds/kubernetes.py connects it): one API server's
calls (adapters/kube.py) and the verbs that differ by kind (adapters/cluster.py)."""

from __future__ import annotations

import threading
import time

from fleetmedic.adapters.cluster import Done
from fleetmedic.adapters.kube import Kube
from fleetmedic.kinds import kubedrain
from fleetmedic.model.config.safety import DrainConfig
from fleetmedic.model.nodestate import NodeView


class KubernetesCluster(Kube):
    """One API server as the controller's Cluster (adapters/cluster.py)."""

    def drain(
        self,
        node: str,
        settings: DrainConfig,
        *,
        timeout: float | None,
        force: bool,
        gpu_only: bool,
        cancel: threading.Event,
    ) -> Done:
        done = kubedrain.drain(
            self, node, settings, timeout=timeout, force_blocked=force, gpu_only=gpu_only
        )
        return Done(done.status, done.message)

    def settle(self, view: NodeView, cancel: threading.Event) -> float:
        return time.time()  # the API server answered: the record is in etcd already

    def reboot(
        self,
        view: NodeView,
        *,
        via: str,
        why: str,
        timeout: float,
        requested_at: float,
        cancel: threading.Event,
    ) -> Done | None:
        return None  # the reboot playbook (roles/reboot), whatever ``via`` says
