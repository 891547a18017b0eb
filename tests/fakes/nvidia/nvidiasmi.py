#!/usr/bin/env python3
"""Fake ``nvidia-smi`` for fleetmedic's tests: reads and changes the same scenario file as
the fake libnvidia-ml.so.1 (tests/fakes/nvml/fake_nvml.c), so a reset done here is what
the checks (real pynvml on the fake library) see next.

    $FLEETMEDIC_FAKE_NVML, else /var/lib/fleetmedic-test/nvml.json

Emulated, with the real tool's messages and exit codes (sources in
tests/fakes/nvidia/README.md):

- ``-L``; ``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` for index, name, uuid,
  pci.bus_id, persistence_mode, ecc.errors.uncorrected.volatile.total,
  ecc.errors.uncorrected.aggregate.total, retired_pages.pending, remapped_rows.pending;
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


def uuid(i: int, g: dict) -> str:
    return g.get("uuid") or f"GPU-fa4e5d1c-0000-4000-8000-{i:012x}"


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
        "pci.bus_id": bus_id(i, g),
        "persistence_mode": "Enabled" if persistence(g) else "Disabled",
        "ecc.errors.uncorrected.volatile.total": str(g.get("ecc_volatile_uncorrected", 0)),
        "ecc.errors.uncorrected.aggregate.total": str(
            g.get("ecc_aggregate_uncorrected", g.get("ecc_volatile_uncorrected", 0))
        ),
        "retired_pages.pending": "Yes" if g.get("retired_pages_pending") else "No",
        "remapped_rows.pending": "Yes" if g.get("remapped_rows_pending") else "No",
        "driver_version": sc.get("driver_version", "550.90.07"),
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
        out += [
            f"{'    Product Name':<{col}}: {name(sc, g)}",
            f"{'    Persistence Mode':<{col}}: {pm}",
            f"{'    GPU UUID':<{col}}: {uuid(i, g)}",
            "    ECC Errors",
            "        Volatile",
            f"{'            DRAM Uncorrectable':<{col}}: {g.get('ecc_volatile_uncorrected', 0)}",
            "    Retired Pages",
            f"{'        Pending Page Blacklist':<{col}}: {pend}",
            "    Remapped Rows",
            f"{'        Pending':<{col}}: {remap}",
        ]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- command line
def parse(argv: list[str]) -> dict:
    opts: dict = {}
    k = 0
    while k < len(argv):
        key, eq, value = argv[k].partition("=")
        k += 1
        takes_value = key in ("-i", "--id", "-pm", "--persistence-mode", "--query-gpu", "--format")
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
        elif key in ("-h", "--help"):
            opts["help"] = True
        else:
            raise Fail(USAGE, RC_INVALID)
    return opts


def run(argv: list[str]) -> tuple[str, str, int]:
    opts = parse(argv)
    if opts.get("help"):
        return "NVIDIA System Management Interface -- fleetmedic test stand-in\n", "", 0
    lock = open(f"{path()}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        sc = load()
        sc["gpus"] = gpus(sc)
        sel = select(sc, opts.get("id"))
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
            return (
                "".join(
                    f"GPU {i}: {name(sc, sc['gpus'][i])} (UUID: {uuid(i, sc['gpus'][i])})\n"
                    for i in sel
                ),
                "",
                0,
            )
        if "query" in opts:
            return query(sc, sel, opts["query"], opts.get("format", "")), "", 0
        if opts.get("q"):
            return full_query(sc, sel), "", 0
        return summary(sc, sel), "", 0
    finally:
        lock.close()


def main() -> int:
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
