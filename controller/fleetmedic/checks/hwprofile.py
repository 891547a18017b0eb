"""Hardware profiles: compare a node with what its type should have (issue 20 part 1).

Profiles are data (``fleetmedic/data/hardware_profiles.yaml``, each figure with its
public source); an operator's file of the same shape adds or replaces profiles by name.
:func:`select` picks one by a node label's value (``node.kubernetes.io/instance-type``
unless the operator names another label or a pool). :func:`compare` turns what the
node has (an :class:`Inventory`, filled from NVML or amd-smi and from sysfs) into one
result per figure; a mismatch is a ``problem`` whose summary and evidence are the
difference ("7 of 8 GPUs", "GPU 3 PCIe Gen4 x8, expected Gen5 x16", "mlx5_3/1 at
200 Gb/s, expected 400"). :func:`compare_gpus` and :func:`compare_rdma` are the two
halves, so the GPU part runs with the GPU checks and the RDMA part with the fabric
checks (which keep running while a node is under repair). A figure the node could not
read (``None``) is not compared. Pure: no I/O beyond reading the YAML files.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetmedic.checks import fabric
from fleetmedic.checks.base import Category, CheckResult, ok, problem

DEFAULT_LABEL = "node.kubernetes.io/instance-type"
MEMORY_TOLERANCE = 0.95  # a GPU reporting under 95 % of the nominal memory is a finding
BUSBW_TOLERANCE = 0.2
"""How far below a profile's ``expected_busbw_gbps`` a single-node all-reduce may measure
and still pass the burn-in (a profile's ``busbw_tolerance`` replaces it). 20 %: the margin a
published nccl-tests guide gives before "something is off"
(docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests); runs of one machine type
differ by NCCL version, clocks and NVLS, while a link down or a GPU stuck in a low
PCIe/NVLink state costs far more than that."""
_FIELDS = {
    "match",
    "gpus",
    "model",
    "memory_gib",
    "nvlink_links",
    "xgmi_links",
    "pcie_gen",
    "pcie_width",
    "rdma",
    "expected_busbw_gbps",
    "busbw_tolerance",
}


class ProfileError(ValueError):
    """A profile file that cannot be used (one line, names the file and the field)."""


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    model: str | None = None  # None: not read
    memory_mib: int | None = None
    pcie_gen: int | None = None  # current link generation
    pcie_width: int | None = None  # current link width
    links_up: int | None = None  # NVLink / XGMI links active


@dataclasses.dataclass(frozen=True)
class Inventory:
    gpus: Sequence[Gpu] = ()
    ports: Sequence[fabric.Port] = ()


def load(extra: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The shipped profiles, then the operator's file (same name replaces)."""
    text = resources.files("fleetmedic.data").joinpath("hardware_profiles.yaml").read_text()
    profiles = _parse(text, "hardware_profiles.yaml")
    if extra is not None:
        try:
            extra_text = Path(extra).read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"{extra}: {exc.strerror or exc}") from None
        profiles.update(_parse(extra_text, str(extra)))
    return profiles


def load_cached(extra: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """:func:`load`, read again only when the operator's file changes (the agent asks
    every round)."""
    stamp = None
    if extra is not None:
        try:
            st = Path(extra).stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None  # load() says why
    return _load_once(None if extra is None else str(extra), stamp)


@functools.lru_cache(maxsize=4)
def _load_once(extra: str | None, stamp: tuple[int, int] | None) -> dict[str, dict[str, Any]]:
    return load(extra)


def choose(
    profiles: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, str],
    *,
    label: str = DEFAULT_LABEL,
    pool: str | None = None,
    profile: str | None = None,
) -> tuple[str | None, str]:
    """(profile name or None, one line saying why), for the log. A named ``profile``
    wins; it must exist (:class:`ProfileError` otherwise)."""
    if profile:
        if profile not in profiles:
            raise ProfileError(f"no hardware profile named {profile!r} (have {sorted(profiles)})")
        return profile, f"hardware profile {profile} (named in the config)"
    picked = select(profiles, labels, label, pool)
    value = labels.get(label)
    said = f"{label}={value}" if value else f"no {label} label"
    if pool:
        said += f", pool {pool}"
    if picked is None:
        return None, f"no hardware profile matches ({said}): no profile checks"
    return picked[0], f"hardware profile {picked[0]} ({said})"


def expected_busbw(profile: Mapping[str, Any]) -> tuple[float, float] | None:
    """(the all-reduce bus bandwidth a node of this profile reaches at large sizes, in GB/s;
    the fraction below it that still passes), or None when the profile states none."""
    if "expected_busbw_gbps" not in profile:
        return None
    return float(profile["expected_busbw_gbps"]), float(
        profile.get("busbw_tolerance", BUSBW_TOLERANCE)
    )


def _parse(text: str, source: str) -> dict[str, dict[str, Any]]:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not YAML ({exc})") from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict):
        raise ProfileError(f"{source}: needs a 'profiles:' mapping")
    out: dict[str, dict[str, Any]] = {}
    for name, body in profiles.items():
        if not isinstance(body, dict):
            raise ProfileError(f"{source}: profile {name!r} is not a mapping")
        unknown_keys = set(body) - _FIELDS
        if unknown_keys:
            raise ProfileError(f"{source}: profile {name!r}: unknown {sorted(unknown_keys)}")
        for key in ("expected_busbw_gbps", "busbw_tolerance"):
            if key in body and not _number_in(body[key], key):
                raise ProfileError(f"{source}: profile {name!r}: {key} {body[key]!r} out of range")
        match = body.get("match") or [name]
        out[str(name)] = {**body, "match": [str(m) for m in match]}
    return out


def _number_in(value: Any, key: str) -> bool:
    """A bandwidth is positive; a tolerance is a fraction below 1 (0.2 = 20 % below)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 < value < 1 if key == "busbw_tolerance" else value > 0


def select(
    profiles: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, str],
    label: str = DEFAULT_LABEL,
    pool: str | None = None,
) -> tuple[str, Mapping[str, Any]] | None:
    """The profile whose ``match`` holds the label's value (or the pool's name)."""
    wanted = [v for v in (labels.get(label), pool) if v]
    for value in wanted:
        for name, body in profiles.items():
            if value in body["match"]:
                return name, body
    return None


def compare(profile: Mapping[str, Any], inv: Inventory) -> list[CheckResult]:
    """One result per figure the profile states."""
    return compare_gpus(profile, inv.gpus) + compare_rdma(profile, inv.ports)


def compare_gpus(profile: Mapping[str, Any], found: Sequence[Gpu]) -> list[CheckResult]:
    """The GPU figures (count, model, memory, links, PCIe), category ``gpu``."""
    out: list[CheckResult] = []
    gpus = list(found)
    if "gpus" in profile:
        want = int(profile["gpus"])
        name = "profile.gpus"
        if len(gpus) != want:
            diff = f"{len(gpus)} of {want} GPUs"
            out.append(problem(name, diff, found=len(gpus), expected=want, difference=[diff]))
        else:
            out.append(ok(name, f"{want} GPUs", found=want, expected=want, difference=[]))
    if "model" in profile:
        want_model = str(profile["model"])
        wrong = [
            f"GPU {g.index} is {g.model!r}"
            for g in gpus
            if g.model is not None and want_model not in g.model
        ]
        out.append(_verdict("profile.model", wrong, f"all {want_model}"))
    if "memory_gib" in profile:
        floor = float(profile["memory_gib"]) * 1024 * MEMORY_TOLERANCE
        small = [
            f"GPU {g.index} has {g.memory_mib // 1024} GiB, expected {profile['memory_gib']}"
            for g in gpus
            if g.memory_mib is not None and g.memory_mib < floor
        ]
        out.append(_verdict("profile.memory", small, f"{profile['memory_gib']} GiB per GPU"))
    links = profile.get("nvlink_links", profile.get("xgmi_links"))
    if links is not None:
        kind = "NVLink" if "nvlink_links" in profile else "XGMI"
        few = [
            f"GPU {g.index} has {g.links_up} of {links} {kind} links up"
            for g in gpus
            if g.links_up is not None and g.links_up < int(links)
        ]
        out.append(_verdict("profile.links", few, f"{links} {kind} links per GPU"))
    if "pcie_gen" in profile or "pcie_width" in profile:
        gen, width = profile.get("pcie_gen"), profile.get("pcie_width")
        slow = [
            f"GPU {g.index} PCIe Gen{g.pcie_gen} x{g.pcie_width}, "
            f"expected Gen{gen or g.pcie_gen} x{width or g.pcie_width}"
            for g in gpus
            if (gen and g.pcie_gen is not None and g.pcie_gen < int(gen))
            or (width and g.pcie_width is not None and g.pcie_width < int(width))
        ]
        out.append(_verdict("profile.pcie", slow, f"PCIe Gen{gen} x{width}"))
    return out


def compare_rdma(profile: Mapping[str, Any], found: Sequence[fabric.Port]) -> list[CheckResult]:
    """The RDMA figures (port count, link layer, rate), category ``network``."""
    want = profile.get("rdma")
    if not isinstance(want, Mapping):
        return []
    ports = list(found)
    out: list[CheckResult] = []
    if "count" in want:
        n = int(want["count"])
        diff = [] if len(ports) == n else [f"{len(ports)} of {n} RDMA ports"]
        out.append(_verdict("profile.rdma_count", diff, f"{n} RDMA ports", "network"))
    if "link_layer" in want:
        layer = str(want["link_layer"])
        wrong = [
            f"{p.key} is {p.link_layer or '?'}"
            for p in ports
            if _layer(p.link_layer) != _layer(layer)
        ]
        out.append(_verdict("profile.rdma_link_layer", wrong, f"all {layer}", "network"))
    if "rate_gbps" in want:
        r = fabric.check_rate(ports, float(want["rate_gbps"]))
        diff = list(r.evidence.get("degraded", []))
        out.append(dataclasses.replace(r, name="profile.rdma_rate", evidence={"difference": diff}))
    return out


def _layer(name: str) -> str:
    """The kernel writes ``Unknown`` for a port that is neither InfiniBand nor Ethernet
    (EFA: drivers/infiniband/core/sysfs.c link_layer_show), where ibv_devinfo prints
    ``Unspecified``: a profile may say either."""
    low = name.strip().lower()
    return "unknown" if low in ("unspecified", "unknown") else low


def _verdict(name: str, diffs: list[str], good: str, category: Category = "gpu") -> CheckResult:
    if diffs:
        return problem(name, "; ".join(diffs), category, difference=diffs)
    return ok(name, good, category, difference=[])
