#!/usr/bin/env python3
"""Fake ``nvidia-smi`` for fleetmedic's tests: reads and changes the same scenario file as
the fake libnvidia-ml.so.1 (tests/fakes/nvml/fake_nvml.c), so a reset done here is what
the checks (real pynvml on the fake library) see next.

    $FLEETMEDIC_FAKE_NVML, else /var/lib/fleetmedic-test/nvml.json

Emulated, with the real tool's messages and exit codes (sources in
tests/fakes/nvidia/README.md):

- ``-L``; ``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` for index, name, uuid,
  serial, vbios_version, inforom.img, pci.bus_id, persistence_mode,
  ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total,
  retired_pages.pending, remapped_rows.pending;
  ``-q`` and the bare summary (short forms of the real layouts, for evidence bundles);
- ``-pm 0|1 [-i ID]``: persistence mode, per GPU or all;
- ``-r`` / ``--gpu-reset [-i ID]``: the reset. Refused while persistence mode is on, while
  something holds the GPU (``in_use``), or on an NVSwitch system while the fabric manager
  runs; a lost GPU stays lost. A reset clears what a real one clears: the volatile ECC
  counts (they move into the aggregate ones), pending page retirements and row remaps,
  the recovery action, the GPU's injected ``errors``/``hang``; then ``after_reset`` (an
  object of GPU keys) is merged in, for faults a reset does not cure. ``resets`` counts
  the resets of each GPU.

``-i`` takes an index, a PCI bus id or a UUID, comma-separated. Standard library only: the
test fleet's nodes run it with their own python3.

MIG (tests/fakes/nvidia/README.md, "MIG"): ``-mig 0|1``, ``--query-gpu=mig.mode.current,
mig.mode.pending``, ``mig -lgi``/``-lci`` (both at once too), ``mig -cgi PROFILES [-C]``,
``mig -dci``/``-dgi``, MIG devices in ``-L``. Run as ``nvidia-mig-parted`` (the same file
under that name) it is a fake mig-parted: ``export``, ``apply -f FILE -c NAME``,
``assert -f FILE -c NAME``. A GPU's MIG state belongs to the boot that made it: after a
reboot (a new ``/proc/sys/kernel/random/boot_id``) its instances are gone, and so is MIG
mode itself unless the GPU keeps it in its InfoROM (A100/A30; from Hopper on it does not).
A GPU reset destroys the instances too.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time

SCENARIO_DEFAULT = "/var/lib/fleetmedic-test/nvml.json"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
IN_USE_TAIL = (
    "{n} currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
    "application, graphics application such as an X server, or a monitoring application such "
    "as another instance of nvidia-smi). Please first kill all processes using {these} and all "
    "compute applications running in the system.\n"
)
NVML_TEXT = {
    "NOT_SUPPORTED": "Not Supported",
    "NO_PERMISSION": "Insufficient Permissions",
    "GPU_IS_LOST": "GPU is lost",
    "IN_USE": "In use by another client",
    "TIMEOUT": "Timeout",
    "RESET_REQUIRED": "GPU requires restart",
    "UNKNOWN": "Unknown Error",
}
USAGE = 'Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n'
# nvidia-smi's exit codes (man nvidia-smi, RETURN VALUE)
RC_INVALID, RC_NO_DRIVER, RC_LOST, RC_OTHER = 2, 9, 15, 255
# A fabric manager process on an NVSwitch system holds every GPU (its comm name).
FABRIC_MANAGER_COMM = "nv-fabricmanage"


class Fail(Exception):
    def __init__(self, text: str, rc: int):
        super().__init__(text)
        self.text, self.rc = text, rc


# ---------------------------------------------------------------------- scenario
def path() -> str:
    return os.environ.get("FLEETMEDIC_FAKE_NVML") or SCENARIO_DEFAULT


def load() -> dict:
    try:
        with open(path(), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise Fail(NO_DRIVER, RC_NO_DRIVER) from None
    except ValueError as exc:
        msg = f"Failed to initialize NVML: Unknown Error ({path()}: {exc})\n"
        raise Fail(msg, RC_OTHER) from None
    if not isinstance(data, dict):
        raise Fail("Failed to initialize NVML: Unknown Error\n", RC_OTHER)
    if data.get("init_error"):
        name = str(data["init_error"]).removeprefix("NVML_ERROR_")
        if name == "DRIVER_NOT_LOADED":
            raise Fail(NO_DRIVER, RC_NO_DRIVER)
        if name == "LIB_RM_VERSION_MISMATCH":
            raise Fail("Failed to initialize NVML: Driver/library version mismatch\n", RC_OTHER)
        raise Fail(f"Failed to initialize NVML: {NVML_TEXT.get(name, 'Unknown Error')}\n", RC_OTHER)
    return data


def save(data: dict) -> None:
    """Atomically, so the fake library never reads half a file."""
    tmp = f"{path()}.nvidia-smi.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path())


def gpus(sc: dict) -> list[dict]:
    g = sc.get("gpus")
    return [x if isinstance(x, dict) else {} for x in g] if isinstance(g, list) else []


def bus_id(i: int, g: dict) -> str:
    """As the fake library reports it (nvmlPciInfo_t.busId)."""
    raw = g.get("pci_bus_id") or f"00000000:{0x18 + 0x10 * i:02X}:00.0"
    try:
        dom, bus, rest = raw.split(":")
        dev, fn = rest.split(".")
        return f"{int(dom, 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.{int(fn, 16):X}"
    except ValueError:
        return raw


def node_seed() -> int:
    """FNV-1a of /etc/machine-id (else the host name), as the fake library computes it, so
    a GPU's default serial and UUID are the same through NVML and nvidia-smi, and differ
    between the test fleet's nodes."""
    try:
        with open("/etc/machine-id", "rb") as f:
            text = f.readline().strip()
    except OSError:
        text = b""
    if not text:
        text = os.uname().nodename.encode()
    h = 2166136261
    for byte in text:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def uuid(i: int, g: dict) -> str:
    return g.get("uuid") or f"GPU-{node_seed():08x}-0000-4000-8000-{i:012x}"


def inforom(g: dict) -> str:
    return g.get("inforom_image_version", "G520.0200.00.05")


def serial(i: int, g: dict) -> str:
    return g.get("serial") or f"1652{node_seed() % 10_000_000:07d}{i % 100:02d}"


def name(sc: dict, g: dict) -> str:
    return g.get("name") or sc.get("name") or "NVIDIA H100 80GB HBM3"


def persistence(g: dict) -> bool:
    return bool(g.get("persistence_mode", 1))


def select(sc: dict, ids: str | None) -> list[int]:
    """``-i``: indexes, bus ids or UUIDs, comma-separated; None: every GPU."""
    all_gpus = gpus(sc)
    if ids is None:
        return list(range(len(all_gpus)))
    out = []
    for key in (k.strip() for k in ids.split(",") if k.strip()):
        for i, g in enumerate(all_gpus):
            if (
                key == str(i)
                or key.upper() in (bus_id(i, g), bus_id(i, g)[4:])
                or key == uuid(i, g)
            ):
                out.append(i)
                break
        else:
            raise Fail(f"No devices were found matching the identifier {key!r}\n", 6)
    return out


def fabric_manager_running() -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                    if f.read().strip() == FABRIC_MANAGER_COMM:
                        return True
            except OSError:
                continue
    return False


# ---------------------------------------------------------------------- changes
def set_persistence(sc: dict, sel: list[int], on: bool) -> tuple[str, int]:
    out, rc = [], 0
    for i in sel:
        g = sc["gpus"][i]
        if g.get("lost"):
            out.append(f"Unable to set persistence mode for GPU {bus_id(i, g)}: GPU is lost\n")
            rc = RC_LOST
            continue
        g["persistence_mode"] = 1 if on else 0
        out.append(f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {bus_id(i, g)}.\n")
    if rc:
        out.append("Terminating early due to previous errors.\n")
    else:
        out.append("All done.\n")
    return "".join(out), rc


def refusal(sc: dict, i: int, g: dict, fm_running: bool) -> str | None:
    """Why a reset of this GPU is refused (the real per-GPU reason), or None."""
    if g.get("reset_error"):
        name_ = str(g["reset_error"]).removeprefix("NVML_ERROR_")
        return NVML_TEXT.get(name_, str(g["reset_error"]))
    if persistence(g) or g.get("in_use") or (sc.get("nvswitch") and fm_running):
        return "In use by another client"
    return None


def apply_reset(g: dict) -> None:
    for kind in ("uncorrected", "corrected"):
        vol, agg = f"ecc_volatile_{kind}", f"ecc_aggregate_{kind}"
        if g.get(vol):
            g[agg] = g.get(agg, 0) + g[vol]  # the fake library defaults aggregate to volatile
        g[vol] = 0
    for key in ("retired_pages_pending", "remapped_rows_pending"):
        if g.get(key):
            g[key] = False
    g["recovery_action"] = 0
    g.pop("errors", None)
    g.pop("hang", None)
    g.pop("field_errors", None)
    after = g.get("after_reset")
    if isinstance(after, dict):
        g.update({k: v for k, v in after.items() if k != "after_reset"})
    g["resets"] = int(g.get("resets", 0)) + 1
    g["last_reset"] = time.time()
    if isinstance(g.get("mig"), dict):
        # a reset destroys every GPU and compute instance and applies a pending mode
        m = mig_of(g)
        g["mig"] = {**m, "current": m["pending"], "gis": [], "boot_id": boot_id()}


def reset(sc: dict, sel: list[int], all_gpus: bool) -> tuple[str, str, int]:
    """Returns (stdout, stderr, rc)."""
    all_ = gpus(sc)
    sc["gpus"] = all_
    for i in sel:
        if all_[i].get("lost"):
            return (
                f"Unable to determine the device handle for GPU {bus_id(i, all_[i])}: "
                "GPU is lost. Reboot the system to recover this GPU\n",
                "",
                RC_LOST,
            )
    fm = bool(sc.get("nvswitch")) and fabric_manager_running()
    refused = [(i, why) for i in sel if (why := refusal(sc, i, all_[i], fm))]
    if refused:
        in_use = [i for i, why in refused if why == "In use by another client"]
        out = ["The following GPUs could not be reset:\n"]
        out += [f"  GPU {bus_id(i, all_[i])}: {why}\n" for i, why in refused]
        if in_use:
            n = len(in_use)
            out.append("\n")
            out.append(
                IN_USE_TAIL.format(
                    n=f"{n} device is" if n == 1 else f"{n} devices are",
                    these="this device" if n == 1 else "these devices",
                )
            )
        return "".join(out), "", RC_OTHER
    lines = []
    for i in sel:
        apply_reset(all_[i])
        lines.append(f"GPU {bus_id(i, all_[i])} was successfully reset.\n")
    if all_gpus and sc.get("nvswitch"):
        sc["nvswitch_resets"] = int(sc.get("nvswitch_resets", 0)) + 1
    return "".join(lines) + ("All done.\n" if all_gpus else ""), "", 0


# ---------------------------------------------------------------------- queries
def field(sc: dict, i: int, g: dict, key: str, units: bool) -> str:
    lost = g.get("lost")
    if key == "index":
        return str(i)
    if lost:
        return "[GPU is lost]"
    values = {
        "name": name(sc, g),
        "uuid": uuid(i, g),
        "serial": serial(i, g),
        "vbios_version": g.get("vbios_version", "96.00.99.00.01"),
        "inforom.img": inforom(g),
        "pci.bus_id": bus_id(i, g),
        "persistence_mode": "Enabled" if persistence(g) else "Disabled",
        "ecc.errors.uncorrected.volatile.total": str(g.get("ecc_volatile_uncorrected", 0)),
        "ecc.errors.uncorrected.aggregate.total": str(
            g.get("ecc_aggregate_uncorrected", g.get("ecc_volatile_uncorrected", 0))
        ),
        "retired_pages.pending": "Yes" if g.get("retired_pages_pending") else "No",
        "remapped_rows.pending": "Yes" if g.get("remapped_rows_pending") else "No",
        "driver_version": sc.get("driver_version", "550.90.07"),
        "mig.mode.current": "Enabled" if mig_of(g)["current"] else "Disabled",
        "mig.mode.pending": "Enabled" if mig_of(g)["pending"] else "Disabled",
    }
    if key not in values:
        raise Fail(f'Field "{key}" is not a valid field to query.\n', RC_INVALID)
    return values[key]


def query(sc: dict, sel: list[int], fields: str, fmt: str) -> str:
    keys = [k.strip() for k in fields.split(",") if k.strip()]
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        raise Fail('"--format" must include "csv".\n', RC_INVALID)
    rows = [] if "noheader" in opts else [", ".join(keys)]
    for i in sel:
        g = sc["gpus"][i]
        rows.append(", ".join(field(sc, i, g, k, "nounits" not in opts) for k in keys))
    return "\n".join(rows) + "\n"


def summary(sc: dict, sel: list[int]) -> str:
    drv = sc.get("driver_version", "550.90.07")
    cuda = int(sc.get("cuda_driver_version", 12040))
    bar = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    cuda_v = f"{cuda // 1000}.{cuda % 1000 // 10}"
    out = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        "+" + "-" * 89 + "+",
        f"| NVIDIA-SMI {drv:<22} Driver Version: {drv:<14} CUDA Version: {cuda_v:<10} |",
        bar,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A "
        "| Volatile Uncorr. ECC |",
        bar,
    ]
    for i in sel:
        g = sc["gpus"][i]
        if g.get("lost"):
            out.append(f"| {i:>3}  {'ERR!':<34} | {bus_id(i, g)} Off | {'ERR!':>20} |")
        else:
            pm = "On" if persistence(g) else "Off"
            out.append(
                f"| {i:>3}  {name(sc, g)[:24]:<24} {pm:>6} | {bus_id(i, g)} Off |"
                f" {g.get('ecc_volatile_uncorrected', 0):>20} |"
            )
        out.append(bar)
    return "\n".join(out) + "\n"


def full_query(sc: dict, sel: list[int]) -> str:
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"Timestamp                                 : {time.strftime('%a %b %d %H:%M:%S %Y')}",
        f"Driver Version                            : {sc.get('driver_version', '550.90.07')}",
        f"Attached GPUs                             : {len(gpus(sc))}",
    ]
    for i in sel:
        g = sc["gpus"][i]
        out.append(f"GPU {bus_id(i, g)}")
        if g.get("lost"):
            out.append("    Product Name                          : Unknown Error")
            continue
        pm = "Enabled" if persistence(g) else "Disabled"
        pend = "Yes" if g.get("retired_pages_pending") else "No"
        remap = "Yes" if g.get("remapped_rows_pending") else "No"
        col = 42  # the real layout's value column
        fail = "Yes" if g.get("remapped_rows_failure") else "No"
        out += [
            f"{'    Product Name':<{col}}: {name(sc, g)}",
            f"{'    Persistence Mode':<{col}}: {pm}",
            f"{'    Serial Number':<{col}}: {serial(i, g)}",
            f"{'    GPU UUID':<{col}}: {uuid(i, g)}",
            f"{'    VBIOS Version':<{col}}: {g.get('vbios_version', '96.00.99.00.01')}",
            f"{'    Board Part Number':<{col}}: {g.get('board_part_number', '692-2G520-0200-000')}",
            "    Inforom Version",
            f"{'        Image Version':<{col}}: {inforom(g)}",
            "    ECC Errors",
            "        Volatile",
            f"{'            DRAM Uncorrectable':<{col}}: {g.get('ecc_volatile_uncorrected', 0)}",
            "    Retired Pages",
            f"{'        Single Bit ECC':<{col}}: {g.get('retired_pages_sbe', 0)}",
            f"{'        Double Bit ECC':<{col}}: {g.get('retired_pages_dbe', 0)}",
            f"{'        Pending Page Blacklist':<{col}}: {pend}",
            "    Remapped Rows",
            f"{'        Correctable Error':<{col}}: {g.get('remapped_rows_correctable', 0)}",
            f"{'        Uncorrectable Error':<{col}}: {g.get('remapped_rows_uncorrectable', 0)}",
            f"{'        Pending':<{col}}: {remap}",
            f"{'        Remapping Failure Occurred':<{col}}: {fail}",
        ]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- MIG
# GPU instance profiles: name -> (profile id, compute slices, memory slices, placements).
# From NVIDIA's MIG User Guide ("Supported MIG Profiles": H100 80GB and A100 40GB tables,
# the profile IDs nvidia-smi mig -lgip prints and their placements).
PROFILES_H100 = {
    "1g.10gb": (19, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g.20gb": (15, 1, 2, (0, 2, 4, 6)),
    "2g.20gb": (14, 2, 2, (0, 2, 4)),
    "3g.40gb": (9, 3, 4, (0, 4)),
    "4g.40gb": (5, 4, 4, (0,)),
    "7g.80gb": (0, 7, 8, (0,)),
}
PROFILES_A100 = {
    "1g.5gb": (19, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g.10gb": (15, 1, 2, (0, 2, 4, 6)),
    "2g.10gb": (14, 2, 2, (0, 2, 4)),
    "3g.20gb": (9, 3, 4, (0, 4)),
    "4g.20gb": (5, 4, 4, (0,)),
    "7g.40gb": (0, 7, 8, (0,)),
}
# compute instance profile id of a CI that spans its whole GPU instance, by slices
CI_PROFILE_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
BOOT_ID_DEFAULT = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    """This boot's id (``$FLEETMEDIC_FAKE_BOOT_ID`` names another file, for unit tests)."""
    try:
        with open(os.environ.get("FLEETMEDIC_FAKE_BOOT_ID") or BOOT_ID_DEFAULT) as f:
            return f.read().strip()
    except OSError:
        return ""


def profiles(g: dict) -> dict:
    return PROFILES_A100 if "A100" in str(g.get("name", "")) else PROFILES_H100


def mig_keeps_mode(g: dict) -> bool:
    """A100/A30 keep MIG mode in the InfoROM across a reboot; from Hopper on it is not
    kept (the issue's premise, and the MIG User Guide's note on H100)."""
    if "mig_persistent" in g:
        return bool(g["mig_persistent"])
    return any(m in str(g.get("name", "")) for m in ("A100", "A30"))


def mig_of(g: dict) -> dict:
    """The GPU's MIG state now: ``{"current", "pending", "gis", "boot_id"}``. State made in
    an earlier boot is what that boot left: no instances, and the mode only where kept."""
    m = g.get("mig") if isinstance(g.get("mig"), dict) else {}
    cur = {
        "current": int(bool(m.get("current", 0))),
        "pending": int(bool(m.get("pending", m.get("current", 0)))),
        "gis": [x for x in m.get("gis") or [] if isinstance(x, dict)],
        "boot_id": m.get("boot_id") or boot_id(),
    }
    now = boot_id()
    if m and cur["boot_id"] != now:
        mode = cur["pending"] if mig_keeps_mode(g) else 0
        cur = {"current": mode, "pending": mode, "gis": [], "boot_id": now}
    return cur


def mig_uuid(i: int, gi: int, ci: int) -> str:
    """A MIG device's UUID (``MIG-`` and a UUID, as R470+ drivers print); the fake NVML
    derives the same one."""
    return f"MIG-5a1c{i:04x}-{gi:04x}-4{ci:03x}-8000-00000000{i:04x}"


def list_line(sc: dict, i: int) -> str:
    g = sc["gpus"][i]
    out = [f"GPU {i}: {name(sc, g)} (UUID: {uuid(i, g)})\n"]
    k = 0
    for gi in sorted(mig_of(g)["gis"], key=lambda x: x["id"]):
        for ci in sorted(gi.get("cis") or [], key=lambda x: x["id"]):
            out.append(
                f"  MIG {gi['profile']:<12} Device {k:>2}: "
                f"(UUID: {mig_uuid(i, gi['id'], ci['id'])})\n"
            )
            k += 1
    return "".join(out)


def set_mig_mode(sc: dict, sel: list[int], on: bool) -> tuple[str, int]:
    out, rc = [], 0
    for i in sel:
        g = sc["gpus"][i]
        m = mig_of(g)
        if not on and m["gis"]:
            out.append(
                f"Unable to disable MIG Mode for GPU {bus_id(i, g)}: In use by another client\n"
            )
            rc = RC_OTHER
            continue
        m["pending"] = int(on)
        if not mig_keeps_mode(g) or not g.get("in_use"):
            m["current"] = int(on)  # Hopper applies it at once; A100 when nothing holds the GPU
        else:
            out.append(
                f"Warning: MIG mode is in pending {'enable' if on else 'disable'} state for GPU "
                f"{bus_id(i, g)}:In use by another client\n"
            )
        g["mig"] = m
        out.append(f"{'Enabled' if on else 'Disabled'} MIG Mode for GPU {bus_id(i, g)}\n")
    out.append("Terminating early due to previous errors.\n" if rc else "All done.\n")
    return "".join(out), rc


def place(g: dict, m: dict, prof: str) -> int | None:
    """The first free placement start for a GPU instance of ``prof`` (None: no room)."""
    _, slices, mem, starts = profiles(g)[prof]
    used_mem = set()
    used_compute = 0
    for gi in m["gis"]:
        p = profiles(g).get(gi["profile"])
        if p:
            used_mem.update(range(gi["start"], gi["start"] + p[2]))
            used_compute += p[1]
    if used_compute + slices > 7:
        return None
    for s in starts:
        if not used_mem & set(range(s, s + mem)):
            return s
    return None


def create_gi(g: dict, m: dict, prof: str, with_ci: bool) -> dict | None:
    start = place(g, m, prof)
    if start is None:
        return None
    gid = next(n for n in range(1, 15) if n not in {x["id"] for x in m["gis"]})
    gi = {"id": gid, "profile": prof, "start": start, "cis": []}
    if with_ci:
        gi["cis"].append({"id": 0, "profile": prof})
    m["gis"].append(gi)
    return gi


def profile_name(g: dict, token: str) -> str | None:
    """``-cgi`` takes profile ids or names (``9``, ``3g.40gb``, ``MIG 3g.40gb``)."""
    token = token.strip().removeprefix("MIG ").strip()
    for nm, p in profiles(g).items():
        if token in (nm, str(p[0])):
            return nm
    return None


def table(title: str, head: list[str], rows: list[str], width: int) -> str:
    bar = "+" + "-" * width + "+"
    out = [bar, f"| {title:<{width - 1}}|"]
    out += [f"|{h:<{width}}|" for h in head]
    out.append("|" + "=" * width + "|")
    for r in rows:
        out += [f"|{r:<{width}}|", bar]
    return "\n".join(out) + "\n"


def list_gis(sc: dict, sel: list[int]) -> str:
    rows = []
    for i in sel:
        g = sc["gpus"][i]
        for gi in sorted(mig_of(g)["gis"], key=lambda x: x["id"]):
            pid, _, mem, _ = profiles(g)[gi["profile"]]
            place_ = f"{gi['start']}:{mem}"
            rows.append(
                f" {i:>3}  MIG {gi['profile']:<12} {pid:>5}    {gi['id']:>5}    {place_:>8}    "
            )
    if not rows:
        raise Fail("No GPU instances found: Not Found\n", 6)
    return table(
        "GPU instances:",
        [
            " GPU   Name             Profile  Instance   Placement  ",
            "                          ID       ID       Start:Size ",
        ],
        rows,
        55,
    )


def list_cis(sc: dict, sel: list[int]) -> str:
    rows = []
    for i in sel:
        g = sc["gpus"][i]
        for gi in sorted(mig_of(g)["gis"], key=lambda x: x["id"]):
            slices = profiles(g)[gi["profile"]][1]
            for ci in sorted(gi.get("cis") or [], key=lambda x: x["id"]):
                place_ = f"0:{slices}"
                rows.append(
                    f" {i:>3}    {gi['id']:>3}       MIG {ci['profile']:<12} "
                    f"{CI_PROFILE_ID.get(slices, 0):>5}    {ci['id']:>5}     {place_:>8}     "
                )
    if not rows:
        raise Fail("No compute instances found: Not Found\n", 6)
    return table(
        "Compute instances:",
        [
            " GPU     GPU       Name             Profile   Instance   Placement  ",
            "       Instance                       ID        ID       Start:Size ",
            "         ID                                                         ",
        ],
        rows,
        68,
    )


def mig_command(sc: dict, argv: list[str]) -> tuple[str, str, int]:
    """``nvidia-smi mig ...``: list, create and destroy instances."""
    opts: dict = {}
    k = 0
    while k < len(argv):
        a = argv[k]
        k += 1
        if a in (
            "-i",
            "--id",
            "-cgi",
            "--create-gpu-instance",
            "-gi",
            "--gpu-instance-id",
            "-dci",
            "-dgi",
        ):
            if k >= len(argv) and a not in ("-dci", "-dgi"):
                raise Fail(f'Option "{a}" requires an argument.\n', RC_INVALID)
            if k < len(argv) and not argv[k].startswith("-"):
                opts[a], k = argv[k], k + 1
            else:
                opts[a] = ""
        elif a in (
            "-lgi",
            "--list-gpu-instances",
            "-lci",
            "--list-compute-instances",
            "-C",
            "--default-compute-instance",
        ):
            opts[a] = True
        else:
            raise Fail(USAGE, RC_INVALID)
    sel = select(sc, opts.get("-i") or opts.get("--id"))
    out: list[str] = []
    if opts.get("-lgi") or opts.get("--list-gpu-instances"):
        out.append(list_gis(sc, sel))
    if opts.get("-lci") or opts.get("--list-compute-instances"):
        out.append(list_cis(sc, sel))
    if out:
        return "".join(out), "", 0
    changed = False
    for i in sel:
        g = sc["gpus"][i]
        m = mig_of(g)
        if not m["current"]:
            save_if(sc, changed)
            raise Fail(f"Unable to create a GPU instance on GPU {i:>2}: Not Supported\n", RC_OTHER)
        if "-dci" in opts or "-dgi" in opts:
            for gi in list(m["gis"]):
                if "-dci" in opts:
                    for ci in list(gi["cis"]):
                        gi["cis"].remove(ci)
                        out.append(
                            f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU "
                            f"{i:>2} GPU instance ID {gi['id']:>2}\n"
                        )
                if "-dgi" in opts:
                    if gi["cis"]:
                        raise Fail(
                            f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {i:>2}: "
                            "In use by another client\n",
                            RC_OTHER,
                        )
                    m["gis"].remove(gi)
                    out.append(
                        f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {i:>2}\n"
                    )
        for token in (opts.get("-cgi") or opts.get("--create-gpu-instance") or "").split(","):
            if not token.strip():
                continue
            prof = profile_name(g, token)
            if prof is None:
                raise Fail(
                    f"Unable to create a GPU instance on GPU {i:>2}: Invalid Argument\n", RC_INVALID
                )
            gi = create_gi(
                g, m, prof, bool(opts.get("-C") or opts.get("--default-compute-instance"))
            )
            if gi is None:
                g["mig"] = m
                save(sc)
                raise Fail(
                    f"Unable to create a GPU instance on GPU {i:>2} using profile {prof}: "
                    "Insufficient Resources\n",
                    RC_OTHER,
                )
            pid, slices = profiles(g)[prof][0], profiles(g)[prof][1]
            out.append(
                f"Successfully created GPU instance ID {gi['id']:>2} on GPU {i:>2} using profile "
                f"MIG {prof} (ID {pid:>2})\n"
            )
            if gi["cis"]:
                out.append(
                    f"Successfully created compute instance ID  0 on GPU {i:>2} GPU instance ID "
                    f"{gi['id']:>2} using profile MIG {prof} "
                    f"(ID {CI_PROFILE_ID.get(slices, 0):>2})\n"
                )
        g["mig"] = m
        changed = True
    save_if(sc, changed)
    return "".join(out), "", 0


def save_if(sc: dict, changed: bool) -> None:
    if changed:
        save(sc)


def locked(fn):
    lock = open(f"{path()}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        sc = load()
        sc["gpus"] = gpus(sc)
        return fn(sc)
    finally:
        lock.close()


# ------------------------------------------------------------- nvidia-mig-parted
# The fake mig-parted (NVIDIA/mig-parted, cmd/nvidia-mig-parted): `export` prints the
# node's layout as a mig-config spec (`version: v1`, `mig-configs: {current: [...]}`, GPUs
# of one layout merged, into `devices: all` when every GPU shares it: export.go and
# export_test.go), `apply` makes the GPUs match a selected config, `assert` says
# "Selected MIG configuration currently applied" or fails with "Assertion failure:
# selected configuration not currently applied" (assert.go). Errors go out as logrus
# lines on stderr, exit 1. Config files are read as JSON (a YAML subset, which the real
# tool's sigs.k8s.io/yaml reads too) or as YAML where PyYAML is importable.
def gpu_spec(g: dict) -> dict:
    m = mig_of(g)
    spec: dict = {"mig-enabled": bool(m["current"])}
    if m["current"]:
        counts: dict[str, int] = {}
        for gi in m["gis"]:
            for ci in gi.get("cis") or []:
                key = (
                    gi["profile"]
                    if ci["profile"] == gi["profile"]
                    else f"{ci['profile']}.{gi['profile']}"
                )
                counts[key] = counts.get(key, 0) + 1
        spec["mig-devices"] = dict(sorted(counts.items()))
    return spec


def export_spec(sc: dict, label: str) -> dict:
    groups: list[tuple[dict, list[int]]] = []
    for i, g in enumerate(gpus(sc)):
        s = gpu_spec(g)
        for spec, devs in groups:
            if spec == s:
                devs.append(i)
                break
        else:
            groups.append((s, [i]))
    out = []
    for spec, devs in groups:
        d: dict = {"devices": "all" if len(groups) == 1 else devs, **spec}
        out.append(d)
    return {"version": "v1", "mig-configs": {label: out}}


def to_yaml(obj, indent: int = 0) -> str:
    """Just enough YAML for an exported spec (what gopkg.in/yaml.v2 prints for it)."""
    pad = " " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            nested = isinstance(v, dict) or (
                isinstance(v, list) and any(isinstance(x, dict) for x in v)
            )
            if nested and v:
                lines.append(f"{pad}{k}:")
                lines.append(to_yaml(v, indent + (2 if isinstance(v, dict) else 0)))
            else:
                lines.append(f"{pad}{k}: {scalar(v)}")
    else:
        for item in obj:
            body = to_yaml(item, indent + 2).splitlines()
            lines.append(f"{pad}- {body[0].strip()}")
            lines += body[1:]
    return "\n".join(x for x in lines if x)


def scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}"
    return str(v)


def logrus(level: str, msg: str) -> None:
    stamp_ = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write(f'time="{stamp_}" level={level} msg="{msg}"\n')


def read_config(file: str, label: str) -> list[dict]:
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise Fail(f"error parsing config file: read error: {exc}", 1) from None
    try:
        spec = json.loads(text)
    except ValueError:
        try:
            import yaml

            spec = yaml.safe_load(text)
        except Exception as exc:
            raise Fail(f"error parsing config file: unmarshal error: {exc}", 1) from None
    configs = (spec or {}).get("mig-configs") or {}
    if len(configs) > 1 and not label:
        raise Fail(
            "error selecting MIG config: missing required flag 'selected-config' when more "
            "than one config available",
            1,
        )
    if not label and len(configs) == 1:
        label = next(iter(configs))
    if label not in configs:
        raise Fail(f"error selecting MIG config: selected mig-config not present: {label}", 1)
    return [s for s in configs[label] if isinstance(s, dict)]


def wanted(specs: list[dict], i: int, g: dict) -> dict | None:
    for s in specs:
        devs = s.get("devices", "all")
        flt = s.get("device-filter")
        if flt and not any(str(f) in name({}, g) for f in ([flt] if isinstance(flt, str) else flt)):
            continue
        if devs == "all" or (isinstance(devs, list) and i in devs):
            return {
                "mig-enabled": bool(s.get("mig-enabled")),
                **(
                    {"mig-devices": dict(sorted((s.get("mig-devices") or {}).items()))}
                    if s.get("mig-enabled")
                    else {}
                ),
            }
    return None


def log_call(argv: list[str], changed: bool) -> None:
    """What the fake mig-parted was asked, one JSON line a run, beside the scenario."""
    try:
        with open(os.path.join(os.path.dirname(path()), "mig-parted-calls.jsonl"), "a") as f:
            f.write(json.dumps({"argv": argv, "changed": changed, "at": time.time()}) + "\n")
    except OSError:
        pass


def mig_parted(argv: list[str]) -> int:
    sub = argv[0] if argv else ""
    names = {
        "-f": "f",
        "--config-file": "f",
        "-c": "c",
        "--selected-config": "c",
        "-o": "o",
        "--output-format": "o",
        "-l": "l",
        "--config-label": "l",
    }
    flags: dict = {}
    k = 1
    while k < len(argv):
        a, eq, v = argv[k].partition("=")
        k += 1
        if a in names:
            if not eq:
                v, k = (argv[k], k + 1) if k < len(argv) else ("", k)
            flags[names[a]] = v
        elif a in ("-m", "--mode-only"):
            flags["m"] = True
        elif a in ("-d", "--debug"):
            continue
        else:
            sys.stderr.write(f"Incorrect Usage: flag provided but not defined: {a}\n")
            return 1
    try:
        if sub == "export":
            fmt = flags.get("o", "yaml")
            if fmt not in ("json", "yaml"):
                raise Fail(f"unrecognized 'output-format': {fmt}", 1)
            sc = locked(lambda s: s)
            spec = export_spec(sc, str(flags.get("l") or "current"))
            sys.stdout.write(json.dumps(spec, indent=2) if fmt == "json" else to_yaml(spec) + "\n")
            return 0
        if sub not in ("apply", "assert"):
            sys.stderr.write(f"Incorrect Usage: no such command {sub!r}\n")
            return 1
        if not flags.get("f"):
            raise Fail("missing required flags 'config-file'", 1)
        specs = read_config(str(flags["f"]), str(flags.get("c") or ""))
        if sub == "assert":
            sc = locked(lambda s: s)
            for i, g in enumerate(gpus(sc)):
                want = wanted(specs, i, g)
                have = gpu_spec(g)
                if want is not None and (
                    have["mig-enabled"] != want["mig-enabled"]
                    or (not flags.get("m") and have.get("mig-devices") != want.get("mig-devices"))
                ):
                    raise Fail("Assertion failure: selected configuration not currently applied", 1)
            print("Selected MIG configuration currently applied")
            return 0
        said = locked(lambda s: (s.get("fail") or {}).get("nvidia-mig-parted apply"))
        if said:  # an injected failure, as the tool reports one (e.g. a GPU that refuses MIG)
            raise Fail(str(said), 1)
        changed = locked(lambda s: apply_specs(s, specs, bool(flags.get("m"))))
        log_call(argv, changed)
        return 0
    except Fail as f:
        logrus("fatal", f.text.strip())
        return f.rc


def apply_specs(sc: dict, specs: list[dict], mode_only: bool) -> bool:
    changed = False
    for i, g in enumerate(sc["gpus"]):
        want = wanted(specs, i, g)
        if want is None:
            continue
        m = mig_of(g)
        if gpu_spec(g) == want or (mode_only and bool(m["current"]) == want["mig-enabled"]):
            continue
        if bool(m["current"]) != want["mig-enabled"]:
            m["gis"] = []
            m["current"] = m["pending"] = int(want["mig-enabled"])
        if want["mig-enabled"] and not mode_only:
            m["gis"] = []
            # largest first, as mig-parted orders its creations, so placements fit
            order = sorted(
                (p for p, n in want.get("mig-devices", {}).items() for _ in range(int(n))),
                key=lambda p: -profiles(g).get(p, (0, 0, 0, ()))[2],
            )
            for prof in order:
                if prof not in profiles(g):
                    raise Fail(f"error applying MIG configuration: invalid MIG profile: {prof}", 1)
                if create_gi(g, m, prof, True) is None:
                    raise Fail(
                        "error applying MIG configuration: insufficient resources for "
                        f"{prof} on GPU {i}",
                        1,
                    )
        g["mig"] = m
        changed = True
    if changed:
        save(sc)
    return changed


# ---------------------------------------------------------------------- command line
def parse(argv: list[str]) -> dict:
    opts: dict = {}
    k = 0
    while k < len(argv):
        key, eq, value = argv[k].partition("=")
        k += 1
        takes_value = key in (
            "-i",
            "--id",
            "-pm",
            "--persistence-mode",
            "--query-gpu",
            "--format",
            "-mig",
            "--multi-instance-gpu",
        )
        if takes_value and not eq:
            if k >= len(argv):
                raise Fail(f'Option "{key}" requires an argument.\n', RC_INVALID)
            value, k = argv[k], k + 1
        if key in ("-i", "--id"):
            opts["id"] = value
        elif key in ("-pm", "--persistence-mode"):
            if value not in ("0", "1", "ENABLED", "DISABLED"):
                raise Fail(f'Invalid persistence mode "{value}".\n', RC_INVALID)
            opts["pm"] = value in ("1", "ENABLED")
        elif key in ("-r", "--gpu-reset"):
            opts["reset"] = True
        elif key in ("-L", "--list-gpus"):
            opts["list"] = True
        elif key in ("-q", "--query"):
            opts["q"] = True
        elif key == "--query-gpu":
            opts["query"] = value
        elif key == "--format":
            opts["format"] = value
        elif key in ("-mig", "--multi-instance-gpu"):
            if value not in ("0", "1", "ENABLED", "DISABLED"):
                raise Fail(f'Invalid MIG mode "{value}".\n', RC_INVALID)
            opts["mig"] = value in ("1", "ENABLED")
        elif key in ("-h", "--help"):
            opts["help"] = True
        else:
            raise Fail(USAGE, RC_INVALID)
    return opts


def run(argv: list[str]) -> tuple[str, str, int]:
    if argv[:1] == ["mig"]:
        return locked(lambda sc: mig_command(sc, argv[1:]))
    opts = parse(argv)
    if opts.get("help"):
        return "NVIDIA System Management Interface -- fleetmedic test stand-in\n", "", 0
    lock = open(f"{path()}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        sc = load()
        sc["gpus"] = gpus(sc)
        sel = select(sc, opts.get("id"))
        if "mig" in opts:
            out, rc = set_mig_mode(sc, sel, opts["mig"])
            save(sc)
            return out, "", rc
        if "pm" in opts:
            out, rc = set_persistence(sc, sel, opts["pm"])
            save(sc)
            return out, "", rc
        if opts.get("reset"):
            out, err, rc = reset(sc, sel, all_gpus="id" not in opts)
            if rc == 0:  # a refused or failed reset changes nothing
                save(sc)
            return out, err, rc
        if opts.get("list"):
            return "".join(list_line(sc, i) for i in sel), "", 0
        if "query" in opts:
            return query(sc, sel, opts["query"], opts.get("format", "")), "", 0
        if opts.get("q"):
            return full_query(sc, sel), "", 0
        return summary(sc, sel), "", 0
    finally:
        lock.close()


def main() -> int:
    if os.path.basename(sys.argv[0]) == "nvidia-mig-parted":
        return mig_parted(sys.argv[1:])
    try:
        out, err, rc = run(sys.argv[1:])
    except Fail as f:
        # nvidia-smi prints its errors on stdout
        sys.stdout.write(f.text)
        return f.rc
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
