"""Our repair record in a Slurm node's Extra: where it sits and how big it may grow.

Extra holds JSON. Our record is the object under :data:`RECORD_KEY` (the keys are those of
the annotations on Kubernetes); other keys of a JSON Extra are kept as they are, and an
Extra that holds anything but a JSON object is someone else's (adapters/slurm.py then
refuses to write). Why Extra: adapters/slurm.py.

The record is bounded (:data:`RECORD_MAX`): every node's Extra is in each ``sinfo --json``
the controller reads once per poll, so the record's size multiplies by the node count
(bench/slurm_record_size.py measures what the largest costs at 2,000 nodes). A record that
would grow past it loses the oldest attempts of its history first (:func:`fitted`).
"""

from __future__ import annotations

import json
from typing import Any

from fleetmedic.errors import PermanentError
from fleetmedic.model import keys

RECORD_KEY = "fleetmedic"
RECORD_MAX = 32 * 1024
"""Bytes of Extra our record may fill: room for a long repair history, far below what
slurmctld accepted (70,000 characters), small enough that ``sinfo --json`` over a few
thousand nodes stays quick."""


def extra_doc(extra: str) -> dict | None:
    """Extra as a JSON object ({} when empty), or None when it holds anything else."""
    if not extra.strip():
        return {}
    try:
        doc = json.loads(extra)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def fitted(name: str, doc: dict) -> str:
    """``doc`` as Extra's text within :data:`RECORD_MAX` bytes: the oldest attempts of the
    repair history go first (flap damping and status read the recent ones); a record still
    too big without any history is refused (PermanentError, nothing written)."""
    text = _dumps(doc) if doc else ""
    rec = doc.get(RECORD_KEY)
    history: list = []
    if len(text.encode()) > RECORD_MAX and isinstance(rec, dict):
        try:
            loaded = json.loads(rec.get(keys.ANN_HISTORY) or "[]")
        except ValueError:
            loaded = None
        history = loaded if isinstance(loaded, list) else []
    while len(text.encode()) > RECORD_MAX and history and isinstance(rec, dict):
        history = history[max(1, len(history) // 8) :]  # (a few at a time: each try dumps)
        rec[keys.ANN_HISTORY] = _dumps(history)
        text = _dumps(doc)
    if len(text.encode()) > RECORD_MAX:
        raise PermanentError(
            f"Slurm node {name}: record of {len(text.encode())} bytes exceeds {RECORD_MAX} "
            "even without its repair history (nothing written)"
        )
    return text


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
