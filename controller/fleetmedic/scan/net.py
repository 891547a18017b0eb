"""The safety net: driver lines that no catalog rule knows, but that say something failed.

A new driver prints a new line; a rule-only scanner would say nothing. The net
catches a line from a GPU driver (the catalog's ``unclassified`` entries name
each driver's literal: ``NVRM``, ``nvidia-nvswitch``, ``amdgpu`` ...) that

1. no rule matched (the scanner asks only then),
2. is not a known-benign shape (``benign`` in the catalog, each with a source), and
3. was logged at kernel level ``err`` or worse (when that driver's levels mean
   something: every NVRM line is printed with ``KERN_ERR``, so for NVRM they
   do not), or says one of the catalog's ``failure_words``.

It becomes an ``<driver>.unclassified`` finding with action ``monitor``: it never
fences on its own; the catalog's ``thresholds`` decide when many of them on
one GPU call for more. :func:`shape` turns a line into its shape (numbers, hex,
PCI ids and names of processes folded), which ``fleetmedic scan --unknown``
groups by and dedup uses, so one new message repeated is one finding.
"""

from __future__ import annotations

import re

from fleetmedic.scan import pci as pcimod
from fleetmedic.scan import regexcache
from fleetmedic.scan.catalog import Catalog
from fleetmedic.scan.finding import Finding

ERR = 3
"""Kernel log level ``err`` (``KERN_ERR``); lower numbers are worse."""

_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (regexcache.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b"), "<pci>"),
    (regexcache.compile(r"\bGPU-[0-9a-fA-F-]{36}\b"), "<uuid>"),
    (regexcache.compile(r"(?:process|name=|comm|thread)\s*[:=]?\s*\S+?(?=[\s,)]|$)"), "<proc>"),
    (regexcache.compile(r"\bGPU\d+\b"), "GPU<n>"),
    (regexcache.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (regexcache.compile(r"\b[0-9a-fA-F]*\d[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b"), "<hex>"),
    (regexcache.compile(r"\b[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\d[0-9a-fA-F]*\b"), "<hex>"),
    (regexcache.compile(r"(?<![\w.])-?\d+(?:\.\d+)*\b"), "<n>"),
    (regexcache.compile(r"\s+"), " "),
)


def shape(message: str) -> str:
    """``message`` with the parts that vary between occurrences folded to placeholders."""
    text = message.strip()
    for regex, placeholder in _SHAPES:
        text = regex.sub(placeholder, text)
    return text


def unclassified(message: str, level: int | None, catalog: Catalog) -> Finding | None:
    """The net's finding for an unmatched ``message`` logged at ``level``, or ``None``."""
    rule = catalog.net_for(message)
    if rule is None or catalog.is_benign(message):
        return None
    severe = rule.level_counts and level is not None and level <= ERR
    words = catalog.failure_words
    if not severe and (words is None or words.search(message) is None):
        return None
    return Finding(
        line=0,
        vendor=rule.vendor,
        kind=rule.kind,
        code=None,
        pci=pcimod.find(message),
        action=rule.action,
        bucket=None,
        message=message.strip(),
        rule=rule.id,
        dedup_code=f"{rule.id}:{shape(message)}",
    )
