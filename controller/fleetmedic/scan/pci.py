"""PCI bus ids as the scanner reports them: lowercase ``dddd:bb:dd``.

Drivers write the same device in several ways: ``PCI:0000:3B:00`` (Xid),
``0000:03:00`` (legacy Xid), ``0000:04:00.0`` (SXid, amdgpu, with the
function), ``00000000:3b:00.0`` (NVML's 8-digit domain) and ``3b:00.0``
(no domain). :func:`normalize` maps all of them to one key so that findings
from different sources about one GPU dedup together.
"""

from __future__ import annotations

from fleetmedic.scan import regexcache

_BDF = regexcache.compile(
    r"(?<![0-9A-Fa-f:])(?:PCI:)?(?:(?P<dom>[0-9A-Fa-f]{4,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<fn>[0-7]))?(?![0-9A-Fa-f:])"
)
_FULL_BDF = regexcache.compile(
    r"(?<![0-9A-Fa-f:])(?P<dom>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<fn>[0-7]))?(?![0-9A-Fa-f:])"
)


def _format(dom: str | None, bus: str, dev: str) -> str:
    domain = (dom or "0000")[-4:].rjust(4, "0")
    return f"{domain}:{bus}:{dev}".lower()


def normalize(text: str | None) -> str | None:
    """The ``dddd:bb:dd`` form of one PCI id, or ``None`` if ``text`` is not one.

    >>> normalize("PCI:0000:3B:00")
    '0000:3b:00'
    >>> normalize("0000:04:00.0")
    '0000:04:00'
    >>> normalize("00000000:3b:00.0")
    '0000:3b:00'
    """
    if not text:
        return None
    match = _BDF.fullmatch(text.strip())
    if match is None:
        return None
    return _format(match["dom"], match["bus"], match["dev"])


def find(message: str) -> str | None:
    """The first full PCI id (with a domain) in free text, normalised, or ``None``.

    Only ids with a domain count here, so that times such as ``05:03:41``
    and version strings are never taken for devices.
    """
    match = _FULL_BDF.search(message)
    if match is None:
        return None
    return _format(match["dom"], match["bus"], match["dev"])
