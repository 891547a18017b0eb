"""Kernel-log scanner and fault catalog (``fleetmedic scan``).

The library API the agent uses:

- :class:`Scanner` (``Scanner(catalog=None, *, boot_id=None, dedup=True)``):
  ``feed(line, lineno=None) -> list[Finding]``, ``scan(lines) -> Iterator[Finding]``,
  ``scan_binary(stream) -> Iterator[Finding]`` and ``scan_path(path, jobs=1)``
  (fast paths for files), ``lines_read``.
- :class:`Finding`: frozen; ``to_json()`` gives the eight contract fields.
- :class:`Dedup`: ``admit(finding, boot=None) -> bool``, ``to_state()`` /
  ``Dedup.from_state(state)`` to keep it across restarts,
  ``forget_boots_except(boot_id)``.
- followers: :func:`follow_kmsg`, :func:`follow_file`, :func:`follow_journal`,
  :func:`follow` (by source name); :func:`current_boot_id`; :func:`read_kmsg`
  (the records /dev/kmsg holds now, without waiting).
- boots in a file: :func:`last_boot_offset` (where the last boot starts),
  :func:`is_banner`, :data:`BANNER`.
- :func:`load_catalog` and :func:`classify` for one message.
- :data:`ACTIONS`, :data:`ACTION_RANK`, :data:`JSON_FIELDS`.

Layering: this package may import only :mod:`fleetmedic.model` and
:mod:`fleetmedic.errors` (import-linter enforces it).
"""

from typing import TYPE_CHECKING, Any

from fleetmedic.scan.boot import BANNER, is_banner, last_boot_offset
from fleetmedic.scan.catalog import Catalog
from fleetmedic.scan.catalog import load as load_catalog
from fleetmedic.scan.classify import Classified, classify
from fleetmedic.scan.dedup import Dedup
from fleetmedic.scan.finding import ACTION_RANK, ACTIONS, JSON_FIELDS, Finding, worst
from fleetmedic.scan.scanner import Scanner

if TYPE_CHECKING:
    from fleetmedic.scan.stream import (
        current_boot_id,
        follow,
        follow_file,
        follow_journal,
        follow_kmsg,
        read_kmsg,
    )

_FOLLOWERS = frozenset(
    ("current_boot_id", "follow", "follow_file", "follow_journal", "follow_kmsg", "read_kmsg")
)


def __getattr__(name: str) -> Any:
    # The followers' module is imported on first use: it pulls in subprocess and select,
    # which `fleetmedic scan FILE` never needs (~3 % of its start-up).
    if name in _FOLLOWERS:
        from fleetmedic.scan import stream

        return getattr(stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIONS",
    "ACTION_RANK",
    "BANNER",
    "JSON_FIELDS",
    "Catalog",
    "Classified",
    "Dedup",
    "Finding",
    "Scanner",
    "classify",
    "current_boot_id",
    "follow",
    "follow_file",
    "follow_journal",
    "follow_kmsg",
    "is_banner",
    "last_boot_offset",
    "load_catalog",
    "read_kmsg",
    "worst",
]
