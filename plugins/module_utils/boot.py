# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""The node's kernel boot id, read by the node-side modules (standard library only)."""

from __future__ import annotations

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id():
    """This boot's id, or None when it cannot be read (the controller tells a reboot by it)."""
    try:
        with open(BOOT_ID, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None
