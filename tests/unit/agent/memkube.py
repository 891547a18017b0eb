"""An in-memory Node store with the API server's merge-patch semantics, for the agent's
unit tests (imported by name; pytest puts this directory on sys.path). The same flows run
against the real API server in tests/integration/test_agent_*.py."""

from __future__ import annotations

import copy
import json

from fleetmedic.model.nodeedit import merge_patch

FOREIGN = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}


class MemoryKube:
    """get_node / update_node / post_event over one dict, with merge-patch semantics."""

    def __init__(self, node: dict | None = None) -> None:
        self.node = node or {
            "metadata": {"name": "n1", "annotations": {}, "labels": {}},
            "spec": {"taints": [dict(FOREIGN)]},
        }
        self.events: list[tuple[str, str, str]] = []
        self.writes = 0

    def get_node(self, name: str) -> dict:
        assert name == self.node["metadata"]["name"], "the agent must read only its own node"
        return copy.deepcopy(self.node)

    def update_node(self, name: str, mutate) -> dict:
        old = self.get_node(name)
        new = copy.deepcopy(old)
        if mutate(new) is False or not merge_patch(old, new):
            return old
        self.writes += 1
        self.node = new
        return copy.deepcopy(new)

    def post_event(self, node, reason, message, type="Normal", component="fleetmedic") -> None:
        self.events.append((reason, type, message))

    # test conveniences
    def taints(self) -> set[str]:
        return {f"{t['key']}={t.get('value', '')}" for t in self.node["spec"].get("taints") or []}

    def ann(self, key: str):
        raw = self.node["metadata"]["annotations"].get(key)
        return None if raw is None else json.loads(raw)
