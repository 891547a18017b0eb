"""Which GPU vendor a Slurm node has, from what the node says about itself.

Kubernetes nodes carry ``fleetmedic.io/gpu-vendor``; a Slurm node has no labels, and the
reinstall phase must know whether to reinstall the NVIDIA driver or ROCm. The answer
comes from, in this order:

1. **the agent's record** (``fleetmedic.io/gpu-vendor`` in Extra): the agent on the node
   found an NVIDIA or AMD stack when it ran its checks (agent/loop.py);
2. **the GPU GRES type** (``gpu:h100:8``, ``gpu:mi300x:8``): the site's gres.conf, or what
   slurmd's own detection names (AutoDetect=nvml gives the device name, lower case with
   underscores, e.g. ``nvidia_h100_80gb_hbm3``; AutoDetect=rsmi gives AMD's);
3. **the node's features** (``nvidia``, ``amd``, ``h100``, ``mi250x``, ...), which many
   sites set to let jobs pick a GPU kind.

Each source is read by the same words and model names (:data:`WORDS`, :data:`MODELS`);
a source that names both vendors says nothing, and the next one is asked. None of them:
``unknown`` (the reinstall phase then fails in one line, as on Kubernetes without the
label).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NVIDIA, AMD, UNKNOWN = "nvidia", "amd", "unknown"
RECORD_KEY = "fleetmedic.io/gpu-vendor"
"""The agent's record of the vendor it found (the same words as the Kubernetes label)."""
WORDS = {
    NVIDIA: ("nvidia", "tesla", "geforce", "quadro", "rtx", "cuda"),
    AMD: ("amd", "instinct", "radeon", "rocm"),
}
MODELS = (
    (AMD, re.compile(r"mi\d{2,3}[a-z]?")),  # mi100, mi210, mi250x, mi300a, mi300x, mi355x
    # a100, h100, h200, b200, v100, p100, gh200, gb200, and the short names by hand (a rack
    # called "b12" must not read as a GPU)
    (NVIDIA, re.compile(r"(?:[abhpv]|g[bh])\d{3}[a-z]?|a10g?|a16|a30|a40|l4|l40s?|t4|k80")),
)
_TOKEN = re.compile(r"[a-z0-9]+")


def of_words(words: Iterable[str]) -> str | None:
    """The one vendor ``words`` name (each word split at anything not a letter or digit),
    or None: none named, or both."""
    found = set()
    for word in words:
        for token in _TOKEN.findall(word.lower()):
            for vendor, names in WORDS.items():
                if token in names:
                    found.add(vendor)
            for vendor, model in MODELS:
                if model.fullmatch(token):
                    found.add(vendor)
    return found.pop() if len(found) == 1 else None


def gres_types(gres: str) -> list[str]:
    """The types of the GPU GRES in ``gres`` (``gpu:h100:8(S:0-1),nic:2`` -> [``h100``])."""
    out = []
    for part in re.split(r",(?![^(]*\))", gres or ""):
        fields = part.split("(", 1)[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 3:
            out.append(fields[1])
    return out


def vendor(recorded: str | None, gres: str, features: str) -> str:
    """``nvidia``, ``amd`` or ``unknown`` (see the module doc for the order)."""
    if recorded in (NVIDIA, AMD):
        return recorded
    for words in (gres_types(gres), (features or "").split(",")):
        found = of_words(words)
        if found:
            return found
    return UNKNOWN
