"""What the agent keeps on its Node, as pure edits of a Node dict.

Four annotations (keys in :mod:`fleetmedic.model.keys`), compact JSON, each
written only when its content changes, so a healthy node costs no writes:

- ``fleetmedic.io/strikes``: ``{"gpu": 2, "network": 0}`` (policy ``Strikes``).
- ``fleetmedic.io/last-results``: per category the worst status of the last
  round and, when not ok, what was wrong, plus since when::

      {"gpu": {"status": "problem", "detail": "nvidia.ecc: GPU 3 ...",
               "since": "2026-11-21T12:00:00Z"},
       "network": {"status": "ok", "since": "..."}}

  ``gpu`` reads ``skipped`` while a repair taint is on the node.
- ``fleetmedic.io/last-finding``: the kernel-log watermark
  (:class:`fleetmedic.agent.watermark.Mark`).
- ``fleetmedic.io/monitor-counts``: monitor findings counted against their
  thresholds, per rule and GPU (:mod:`fleetmedic.policy.counts`: ``boot`` and
  ``seen``), and the history NVIDIA's Xid workflows judge by, per rule and GPU
  (:mod:`fleetmedic.policy.workflow`: under ``wf``), the safety net's count and last line
  (:mod:`fleetmedic.policy.netcount`: ``net``) and Fabric Manager's watermark (``fm``).
  One annotation, several parts, each
  written without touching the other.

Taints: the agent adds a repair taint, *raises* one (replaces ours with a stronger
one: fences only go up, :mod:`fleetmedic.policy.fenceup`), and adds or removes
slow-network; it never lowers or removes a repair taint (the ValidatingAdmissionPolicy
in deploy/agent enforces exactly that).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fleetmedic.checks.base import CheckResult, worst
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.nodestate import taints_of
from fleetmedic.model.vocabulary import Vocabulary
from fleetmedic.policy.strikes import Decision, Strikes

MAX_DETAIL = 400  # characters of "what was wrong" per category


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def annotation_json(node: Mapping[str, Any], key: str) -> Any:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def strikes_of(node: Mapping[str, Any]) -> Strikes:
    return Strikes.from_json(annotation_json(node, keys.ANN_STRIKES))


def repair_state(node: Mapping[str, Any], vocab: Vocabulary) -> str | None:
    return vocab.repair_state_of(taints_of(node))


def slow_network(node: Mapping[str, Any], vocab: Vocabulary) -> bool:
    return vocab.has_slow_network(taints_of(node))


def apply_decision(node: dict, decision: Decision, vocab: Vocabulary) -> bool:
    """Taints and strikes of ``decision`` onto ``node``; True if anything changed."""
    changed = nodeedit.set_annotation(node, keys.ANN_STRIKES, dumps(decision.strikes.to_json()))
    if decision.repair:
        changed |= nodeedit.add_taint(node, vocab.repair(decision.repair))
    if decision.slow_network is True:
        changed |= nodeedit.add_taint(node, vocab.slow_network)
    elif decision.slow_network is False:
        changed |= nodeedit.remove_taint(node, vocab.slow_network)
    return changed


def raise_repair(node: dict, current: str, target: str, vocab: Vocabulary) -> bool:
    """Replace the repair taint of ``current`` with ``target``'s (both ours; any other
    taint stays as it is). In the default vocabulary both share one key, and a Node
    cannot carry two taints with the same key and effect: so replace, never add."""
    changed = nodeedit.remove_taint(node, vocab.repair(current))
    return nodeedit.add_taint(node, vocab.repair(target)) or changed


def summarize(
    results: Iterable[CheckResult],
    previous: Any,
    now: str,
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The new ``last-results`` value: ``previous`` with the categories of this round
    replaced; ``skipped`` maps a category to why it did not run."""
    prev = previous if isinstance(previous, Mapping) else {}
    out: dict[str, Any] = {k: v for k, v in prev.items() if isinstance(v, Mapping)}
    by_cat: dict[str, list[CheckResult]] = {}
    for r in results:
        by_cat.setdefault(r.category, []).append(r)
    entries: dict[str, dict[str, Any]] = {}
    for cat, rs in by_cat.items():
        entry: dict[str, Any] = {"status": worst(r.status for r in rs)}
        bad = [r for r in rs if r.status != "ok"]
        if bad:
            entry["detail"] = _clip("; ".join(f"{r.name}: {r.summary}" for r in bad))
        entries[cat] = entry
    for cat, why in (skipped or {}).items():
        entries[cat] = {"status": "skipped", "detail": _clip(why)}
    for cat, entry in entries.items():
        before = out.get(cat) or {}
        same = before.get("status") == entry["status"] and before.get("detail") == entry.get(
            "detail"
        )
        entry["since"] = before.get("since", now) if same else now
        out[cat] = entry
    return out


def set_results(node: dict, summary: Mapping[str, Any]) -> bool:
    return nodeedit.set_annotation(node, keys.ANN_LAST_RESULTS, dumps(summary))


def set_finding(node: dict, mark_json: Mapping[str, Any]) -> bool:
    return nodeedit.set_annotation(node, keys.ANN_LAST_FINDING, dumps(mark_json))


def _clip(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def set_counts(node: dict, counts_json: Mapping[str, Any]) -> bool:
    """The counts' part of ``monitor-counts`` (the other parts kept)."""
    return _set_monitor(node, {**_monitor(node), **counts_json})


def workflow_state(node: Mapping[str, Any]) -> Any:
    return _monitor(node).get("wf")


def set_workflow(node: dict, wf_json: Mapping[str, Any]) -> bool:
    """The workflows' ``wf`` part of ``monitor-counts`` (the counts kept)."""
    return _set_monitor(node, {**_monitor(node), "wf": wf_json})


def net_state(node: Mapping[str, Any]) -> Any:
    return _monitor(node).get("net")


def set_net(node: dict, net_json: Mapping[str, Any]) -> bool:
    """The safety net's ``net`` part of ``monitor-counts`` (policy/netcount.py)."""
    return _set_monitor(node, {**_monitor(node), "net": net_json})


def fabric_state(node: Mapping[str, Any]) -> Any:
    return _monitor(node).get("fm")


def set_fabric(node: dict, fm_json: Mapping[str, Any]) -> bool:
    """Fabric Manager's watermark, the ``fm`` part of ``monitor-counts``."""
    return _set_monitor(node, {**_monitor(node), "fm": fm_json})


def kernel_mark_json(value: Any) -> Any:
    """The kernel log's watermark in ``last-finding``: a Fabric Manager finding that
    fenced since keeps it inside its own (``kernel``), so neither source loses its place."""
    if isinstance(value, Mapping) and value.get("src") == "fabricmanager":
        return value.get("kernel")
    return value


def _monitor(node: Mapping[str, Any]) -> dict[str, Any]:
    raw = annotation_json(node, keys.ANN_MONITOR_COUNTS)
    return dict(raw) if isinstance(raw, Mapping) else {}


def _set_monitor(node: dict, value: Mapping[str, Any]) -> bool:
    clean = {k: v for k, v in value.items() if v is not None}
    return nodeedit.set_annotation(node, keys.ANN_MONITOR_COUNTS, dumps(clean))
