"""Which cluster a log line is about.

Node names repeat across clusters (every cluster has a ``gpu-node-1``), so a controller
that serves several (``clusters:``) prefixes each log line with ``[cluster] `` and puts
``cluster`` in each audit line. The name is a context variable: the cluster's loop sets
it, and the threads it starts carry it (:func:`thread`, :func:`adopt` for pools), since
Python's threads start with an empty context. One cluster, or none: no prefix.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any

CLUSTER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fleetmedic_cluster", default=None
)


class ClusterPrefix(logging.Filter):
    """Gives every record ``cluster_prefix`` (``"[name] "`` or ``""``) for the format."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = CLUSTER.get()
        record.cluster_prefix = f"[{name}] " if name else ""
        return True


_UNSET = object()


def thread(
    target: Callable[..., Any], *, name: str, args: tuple = (), cluster: Any = _UNSET
) -> threading.Thread:
    """A daemon thread that runs ``target`` in a copy of the caller's context (with
    ``cluster`` as the cluster, when given)."""
    ctx = contextvars.copy_context()
    if cluster is not _UNSET:
        ctx.run(CLUSTER.set, cluster)
    return threading.Thread(target=ctx.run, args=(target, *args), name=name, daemon=True)


def adopt(cluster: str | None) -> None:
    """A thread pool's initializer: its threads log under ``cluster``."""
    CLUSTER.set(cluster)
