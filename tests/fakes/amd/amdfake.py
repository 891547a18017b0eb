#!/usr/bin/env python3
"""Fake ``amd-smi``, ``rocm-smi`` and ``rocminfo`` for fleetmedic's tests.

One file, installed three times by scripts/setup.d/40-fakes.sh; the name it is
run as picks the tool. Output follows the real tools' formats (field names,
nesting, units, "N/A" for unsupported values) for the subcommands fleetmedic
uses; values come from a JSON scenario:

    $FLEETMEDIC_FAKE_AMD, else /var/lib/fleetmedic-test/amd.json

Keys are documented in tests/fakes/amd/README.md. A missing scenario file
looks like a node whose amdgpu driver is not loaded. Standard library only:
the test fleet's nodes run it with their own python3.
"""

from __future__ import annotations

import json
import os
import sys
import time

SCENARIO_DEFAULT = "/var/lib/fleetmedic-test/amd.json"
AMD_SMI_VERSION = "25.5.1"
ROCM_VERSION = "6.4.1"
BLOCKS = ("UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP", "XGMI_WAFL")
XGMI_STATUS = {
    0: "AMDSMI_XGMI_STATUS_NO_ERRORS",
    1: "AMDSMI_XGMI_STATUS_ERROR",
    2: "AMDSMI_XGMI_STATUS_MULTIPLE_ERRORS",
}


def load() -> dict | None:
    path = os.environ.get("FLEETMEDIC_FAKE_AMD") or SCENARIO_DEFAULT
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        sys.stderr.write(f"fake-amd: {path}: {exc}\n")
        sys.exit(70)
    return data if isinstance(data, dict) else {}


def maybe_hang(sc: dict, what: list[str]) -> None:
    """ "hang": true | "*" | "amd-smi" | "amd-smi metric" | [...] stalls like a wedged driver."""
    h = sc.get("hang")
    pats = h if isinstance(h, list) else [h]
    if not any(p is True or p == "*" or p in what for p in pats if p):
        return
    secs = sc.get("hang_seconds")
    if isinstance(secs, (int, float)):
        time.sleep(secs)
        return
    while True:
        time.sleep(3600)


def maybe_fail(sc: dict, what: list[str]) -> None:
    for key in what:
        msg = (sc.get("fail") or {}).get(key)
        if msg:
            sys.stderr.write(str(msg).rstrip("\n") + "\n")
            sys.exit(1)


def gpus(sc: dict) -> list[dict]:
    return [g for g in sc.get("gpus") or [] if isinstance(g, dict)]


def node_seed() -> int:
    """FNV-1a of /etc/machine-id (else the host name): default serials and unique ids
    differ between the test fleet's nodes, as real ones do."""
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


def asic_serial(i: int, g: dict) -> str:
    """The unique id (rocm-smi --showuniqueid), 64 bits in hex as amd-smi prints it."""
    return g.get("asic_serial") or f"0x{node_seed():08X}{0x5C2E0000 + i:08X}"


def product_serial(i: int, g: dict) -> str:
    return g.get("serial") or f"PCB{node_seed() % 1_000_000:06d}{i:03d}"


def list_uuid(i: int, g: dict) -> str:
    return g.get("uuid", f"{0x11FF74A1 + i:08x}-0000-1000-8000-{node_seed():08x}{i:04x}")


def bdf(i: int, g: dict) -> str:
    return g.get("bdf") or f"0000:{0x05 + 0x10 * i:02x}:00.0"


def vu(value, unit: str):
    return "N/A" if value in (None, "N/A") else {"value": value, "unit": unit}


# ------------------------------------------------------------------ amd-smi
def ecc_blocks(g: dict) -> dict:
    given = g.get("ecc_blocks") or {}
    out = {}
    for name in BLOCKS:
        b = given.get(name) or {}
        out[name] = {
            "correctable_count": b.get("correctable", 0),
            "uncorrectable_count": b.get("uncorrectable", 0),
            "deferred_count": b.get("deferred", 0),
        }
    if not given:  # totals without a breakdown land on UMC (HBM), where real ones do
        out["UMC"] = {
            "correctable_count": g.get("ecc_correctable", 0),
            "uncorrectable_count": g.get("ecc_uncorrectable", 0),
            "deferred_count": g.get("ecc_deferred", 0),
        }
    return out


def ecc_totals(g: dict) -> dict:
    if g.get("ras_supported", True) is False:
        return {
            k: "N/A"
            for k in (
                "total_correctable_count",
                "total_uncorrectable_count",
                "total_deferred_count",
                "cache_correctable_count",
                "cache_uncorrectable_count",
            )
        }
    blocks = ecc_blocks(g)

    def total(key: str, field: str) -> int:
        return g[key] if key in g else sum(b[field] for b in blocks.values())

    return {
        "total_correctable_count": total("ecc_correctable", "correctable_count"),
        "total_uncorrectable_count": total("ecc_uncorrectable", "uncorrectable_count"),
        "total_deferred_count": total("ecc_deferred", "deferred_count"),
        "cache_correctable_count": g.get("cache_correctable", 0),
        "cache_uncorrectable_count": g.get("cache_uncorrectable", 0),
    }


def metric(i: int, g: dict, sections: set[str]) -> dict:
    width, speed = (
        g.get("pcie_width", g.get("pcie_max_width", 16)),
        g.get("pcie_speed", g.get("pcie_max_speed", 32)),
    )
    xgmi = g.get("xgmi_err", 0)
    all_sections = {
        "usage": lambda: {
            "gfx_activity": vu(g.get("gfx_activity", 0), "%"),
            "umc_activity": vu(0, "%"),
            "mm_activity": "N/A",
        },
        "power": lambda: {
            "socket_power": vu(g.get("power_w", 140), "W"),
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "throttle_status": "THROTTLED" if g.get("throttled") else "UNTHROTTLED",
            "power_management": "ENABLED",
        },
        "temperature": lambda: {
            "edge": "N/A",
            "hotspot": vu(g.get("hotspot_c", 41), "C"),
            "mem": vu(g.get("mem_c", 38), "C"),
        },
        "pcie": lambda: {
            "width": width,
            "speed": vu(speed, "GT/s"),
            "bandwidth": vu(g.get("pcie_bandwidth", 0), "Mb/s"),
            "replay_count": g.get("pcie_replay_count", 0),
            "l0_to_recovery_count": g.get("pcie_l0_to_recovery", 0),
            "replay_roll_over_count": 0,
            "nak_sent_count": 0,
            "nak_received_count": 0,
            "current_bandwidth_sent": "N/A",
            "current_bandwidth_received": "N/A",
            "max_packet_size": "N/A",
            "lc_perf_other_end_recovery": 0,
        },
        "ecc": lambda: ecc_totals(g),
        "ecc_blocks": lambda: ecc_blocks(g) if g.get("ras_supported", True) else "N/A",
        "xgmi_err": lambda: XGMI_STATUS.get(xgmi, "N/A") if isinstance(xgmi, int) else "N/A",
        "mem_usage": lambda: {
            "total_vram": vu(g.get("vram_mb", 196592), "MB"),
            "used_vram": vu(283, "MB"),
            "free_vram": vu(g.get("vram_mb", 196592) - 283, "MB"),
        },
    }
    out: dict = {"gpu": i}
    for name, fn in all_sections.items():
        if not sections or name in sections:
            out[name] = fn()
    return out


def static(i: int, g: dict, sections: set[str]) -> dict:
    all_sections = {
        "asic": lambda: {
            "market_name": g.get("market_name", "AMD Instinct MI300X"),
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": g.get("device_id", "0x74a1"),
            "subsystem_id": "0x74a1",
            "rev_id": "0x00",
            "asic_serial": asic_serial(i, g),
            "oam_id": i,
            "num_compute_units": 304,
            "target_graphics_version": g.get("gfx", "gfx942"),
        },
        "bus": lambda: {
            "bdf": bdf(i, g),
            "max_pcie_width": g.get("pcie_max_width", 16),
            "max_pcie_speed": vu(g.get("pcie_max_speed", 32), "GT/s"),
            "pcie_interface_version": f"Gen {g.get('pcie_max_gen', 5)}",
            "slot_type": "OAM",
        },
        "vbios": lambda: {
            "name": g.get("vbios_name", "AMD MI300X_HW_SRIOV_CVS_1VF"),
            "build_date": "2024/03/12 13:35",
            "part_number": g.get("vbios_part_number", "113-M3000100-102"),
            "version": g.get("vbios_version", "022.040.003.043.000001"),
        },
        "driver": lambda: {"name": "amdgpu", "version": g.get("driver_version", "6.12.12")},
        "partition": lambda: {
            "compute_partition": partition_of(g)["compute"],
            "memory_partition": partition_of(g)["memory"],
            "partition_id": 0,
        },
        "board": lambda: {
            "model_number": "102-G30211-0C",
            "product_serial": product_serial(i, g),
            "fru_id": "N/A",
            "product_name": g.get("market_name", "AMD Instinct MI300X"),
            "manufacturer_name": "AMD",
        },
    }
    out: dict = {"gpu": i}
    for name, fn in all_sections.items():
        if not sections or name in sections:
            out[name] = fn()
    return out


def bad_pages(i: int, g: dict) -> dict:
    bp = g.get("bad_pages") or {}
    if bp == "N/A" or g.get("ras_supported", True) is False:
        return {"gpu": i, "retired": "N/A", "pending": "N/A", "un_res": "N/A"}

    def pages(kind: str, status: str, n: int):
        if not n:
            return "No bad pages found."
        entries = [
            {
                "page_address": 0x7E0000000 + 0x1000 * (k + 1) + (i << 40),
                "page_size": 4096,
                "status": status,
            }
            for k in range(n)
        ]
        return entries[0] if n == 1 else entries  # amd-smi drops the list brackets for one page

    return {
        "gpu": i,
        "retired": pages("retired", "RESERVED", bp.get("retired", 0)),
        "pending": pages("pending", "PENDING", bp.get("pending", 0)),
        "un_res": pages("un_res", "UNRESERVABLE", bp.get("unreservable", 0)),
    }


def human(obj, indent: int = 0) -> str:
    pad = "    " * indent
    if isinstance(obj, dict):
        if set(obj) == {"value", "unit"}:
            return f"{obj['value']} {obj['unit']}"
        lines = []
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and not (
                isinstance(v, dict) and set(v) == {"value", "unit"}
            ):
                lines.append(f"{pad}{str(k).upper()}:\n{human(v, indent + 1)}")
            else:
                lines.append(f"{pad}{str(k).upper()}: {human(v)}")
        return "\n".join(lines)
    if isinstance(obj, list):
        return "\n".join(human(x, indent) for x in obj)
    return str(obj)


METRIC_FLAGS = {
    "-u": "usage",
    "--usage": "usage",
    "-p": "power",
    "--power": "power",
    "-t": "temperature",
    "--temperature": "temperature",
    "-P": "pcie",
    "--pcie": "pcie",
    "-e": "ecc",
    "--ecc": "ecc",
    "-k": "ecc_blocks",
    "--ecc-blocks": "ecc_blocks",
    "-x": "xgmi_err",
    "--xgmi-err": "xgmi_err",
    "-m": "mem_usage",
    "--mem-usage": "mem_usage",
}
STATIC_FLAGS = {
    "-a": "asic",
    "--asic": "asic",
    "-B": "bus",
    "--bus": "bus",
    "-d": "driver",
    "--driver": "driver",
    "-b": "board",
    "--board": "board",
    "-p": "partition",
    "--partition": "partition",
    "-V": "vbios",
    "--vbios": "vbios",
}


def amd_smi(argv: list[str], sc: dict | None) -> int:
    sub = argv[0] if argv else ""
    if sub in ("", "-h", "--help"):
        print(
            f"usage: amd-smi [-h]  ...\n\nAMD System Management Interface | Version: {AMD_SMI_VERSION} | "
            f"ROCm version: {ROCM_VERSION} | Platform: Linux Baremetal"
        )
        return 0
    if sc is None or sc.get("driver_loaded") is False:
        sys.stderr.write(
            "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)\n"
            "AMD-SMI: amdgpu driver not initialized (amdgpu not loaded)\n"
        )
        return 1
    maybe_hang(sc, ["amd-smi", f"amd-smi {sub}"])
    maybe_fail(sc, ["amd-smi", f"amd-smi {sub}"])
    as_json = "--json" in argv
    sel = set()
    for flag in ("-g", "--gpu"):
        if flag in argv:
            k = argv.index(flag) + 1
            while k < len(argv) and not argv[k].startswith("-"):
                if argv[k] == "all":
                    sel.update(range(len(gpus(sc))))
                sel.update(int(x) for x in argv[k].split(",") if x.isdigit())
                k += 1
    if sub == "reset" and any(a in ("-r", "--reload-driver") for a in argv):
        return reload_driver(sc)
    if sub == "reset":
        return reset(argv, sc, sorted(sel), as_json)
    if sub == "set":
        return set_partition(argv, sc, sorted(sel), as_json)
    if sub == "partition":
        return show_partition(sc, sorted(sel), as_json)
    devs = [(i, g) for i, g in enumerate(gpus(sc)) if not sel or i in sel]
    if sub == "version":
        data = {
            "tool": "AMDSMI Tool",
            "version": AMD_SMI_VERSION,
            "amdsmi_library_version": AMD_SMI_VERSION,
            "rocm_version": ROCM_VERSION,
        }
        print(
            json.dumps([data], indent=4)
            if as_json
            else f"AMDSMI Tool: {AMD_SMI_VERSION} | AMDSMI Library version: {AMD_SMI_VERSION} | ROCm version: {ROCM_VERSION}"
        )
        return 0
    if sub == "list":
        out = [
            {
                "gpu": i,
                "bdf": bdf(i, g),
                "uuid": list_uuid(i, g),
                "kfd_id": 2000 + i * 1111,
                "node_id": i + 1,
                "partition_id": 0,
            }
            for i, g in devs
        ]
        wrap = False  # `list` stays a plain list in every amd-smi version we know
    elif sub == "metric":
        sections = {v for k, v in METRIC_FLAGS.items() if k in argv}
        out = [metric(i, g, sections) for i, g in devs]
        wrap = True
    elif sub == "static":
        sections = {v for k, v in STATIC_FLAGS.items() if k in argv}
        out = [static(i, g, sections) for i, g in devs]
        wrap = True
    elif sub == "bad-pages":
        out = [bad_pages(i, g) for i, g in devs]
        wrap = True
    else:
        sys.stderr.write(f"fake amd-smi: subcommand {sub!r} not emulated\n")
        return 2
    if as_json:
        legacy = sc.get("amd_smi_format") == "list"  # amd-smi 24.x (ROCm 6.x) printed a bare list
        print(json.dumps({"gpu_data": out} if wrap and not legacy else out, indent=4))
    else:
        print(
            "\n\n".join(
                f"GPU: {d['gpu']}\n" + human({k: v for k, v in d.items() if k != "gpu"}, 1)
                for d in out
            )
            if sub != "list"
            else "\n\n".join(
                f"GPU: {d['gpu']}\n    BDF: {d['bdf']}\n    UUID: {d['uuid']}\n"
                f"    KFD_ID: {d['kfd_id']}\n    NODE_ID: {d['node_id']}\n    PARTITION_ID: 0"
                for d in out
            )
        )
    return 0


# ------------------------------------------------------------ amd-smi reset
RESET_OK = "Successfully reset GPU"


def hive(sc: dict, i: int) -> list[int]:
    """The GPUs an ``amd-smi reset --gpureset`` of GPU ``i`` resets: its whole XGMI hive
    (``xgmi_hive``, default 0: every GPU of the node in one hive; null: no hive)."""
    all_ = gpus(sc)
    h = all_[i].get("xgmi_hive", 0)
    if h is None:
        return [i]
    return [k for k, g in enumerate(all_) if g.get("xgmi_hive", 0) == h]


def cure(g: dict) -> None:
    """What a GPU reset cures: a hang that dropped the GPU out of the HSA topology, XGMI
    link errors, a link that trained down; then ``after_reset`` for what it does not."""
    g["agent"] = True
    if g.get("xgmi_err") not in (None, "N/A"):
        g["xgmi_err"] = 0
    for key in ("pcie_width", "pcie_speed", "throttled"):
        g.pop(key, None)
    after = g.get("after_reset")
    if isinstance(after, dict):
        g.update({k: v for k, v in after.items() if k != "after_reset"})
    g["resets"] = int(g.get("resets", 0)) + 1
    g["last_reset"] = time.time()
    if "compute_partition" in g or "memory_partition" in g:
        # as the AMD GPU operator's remediation notes: a reset leaves SPX/NPS1
        g.update(compute_partition="SPX", memory_partition="NPS1", partition_boot_id=boot_id())
        g.pop("memory_partition_pending", None)


def reset(argv: list[str], sc: dict, sel: list[int], as_json: bool) -> int:
    if not any(a in ("-G", "--gpureset") for a in argv):
        sys.stderr.write("fake amd-smi: only `reset --gpureset` is emulated\n")
        return 2
    if not sel:
        # amd-smi raises ValueError here; its message is what the user sees
        sys.stderr.write("No GPU provided, specific GPU target(s) are needed\n")
        return 1
    all_ = gpus(sc)
    if any(i >= len(all_) for i in sel):
        sys.stderr.write(f"GPU index out of range: {sel}\n")
        return 1
    results, done = [], set()
    for i in sel:
        members = hive(sc, i)
        if any(all_[k].get("lost") for k in members):
            result = "[AMDSMI_STATUS_IO] Unable to reset GPU"
        elif any(all_[k].get("in_use") for k in members):
            result = "[AMDSMI_STATUS_BUSY] Unable to reset GPU"
        else:
            for k in members:
                if k not in done:
                    cure(all_[k])
                    done.add(k)
            result = RESET_OK
        results.append({"gpu": i, "gpu_reset": result})
    sc["gpus"] = all_
    save(sc)
    # amd-smi reports a failed reset in its output and still exits 0
    if as_json:
        print(json.dumps(results, indent=4))
    else:
        print("\n".join(f"GPU: {r['gpu']}\n    GPU_RESET: {r['gpu_reset']}" for r in results))
    return 0


def save(sc: dict) -> None:
    path = os.environ.get("FLEETMEDIC_FAKE_AMD") or SCENARIO_DEFAULT
    tmp = f"{path}.amd-smi.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(sc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# ------------------------------------------------------- amd-smi partitions
# Compute (accelerator) partition SPX/DPX/QPX/CPX and memory partition NPS1/NPS4, as
# `amd-smi static --partition` prints them ({"partition": {"compute_partition",
# "memory_partition", "partition_id"}}, from the amd-smi CLI's static output) and as
# `amd-smi partition --current` lists them. `amd-smi set -g N --compute-partition X`
# takes effect at once ("Successfully set accelerator partition to X"); `--memory-partition
# NPSn` only after the driver reloads ("Successfully set memory partition to NPSn, use
# `sudo modprobe -r amdgpu && sudo modprobe amdgpu` to reload driver"), here `amd-smi reset
# --reload-driver` (amdsmi_gpu_driver_reload, "Driver control mechanisms" in the AMD SMI
# docs). Messages from ROCm/amdsmi's amdsmi_cli/amdsmi_commands.py. A reboot (a new boot
# id) or a GPU reset leaves SPX/NPS1 unless `partition_persistent` (the AMD GPU operator's
# remediation docs: partitions must be re-applied after it).
COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8")


def boot_id() -> str:
    try:
        with open(
            os.environ.get("FLEETMEDIC_FAKE_BOOT_ID") or "/proc/sys/kernel/random/boot_id"
        ) as f:
            return f.read().strip()
    except OSError:
        return ""


def partition_of(g: dict) -> dict:
    """``{"compute", "memory", "pending"}`` now: what an earlier boot set is gone."""
    made = g.get("partition_boot_id")
    if made and made != boot_id() and not g.get("partition_persistent"):
        return {"compute": "SPX", "memory": "NPS1", "pending": None}
    return {
        "compute": g.get("compute_partition", "SPX"),
        "memory": g.get("memory_partition", "NPS1"),
        "pending": g.get("memory_partition_pending"),
    }


def settle(g: dict) -> None:
    """Write the partition state as of this boot back into the GPU's keys."""
    p = partition_of(g)
    g.update(
        compute_partition=p["compute"], memory_partition=p["memory"], partition_boot_id=boot_id()
    )
    if p["pending"]:
        g["memory_partition_pending"] = p["pending"]
    else:
        g.pop("memory_partition_pending", None)


def arg_after(argv: list[str], *flags: str) -> str | None:
    for f in flags:
        if f in argv and argv.index(f) + 1 < len(argv):
            return argv[argv.index(f) + 1]
    return None


def set_partition(argv: list[str], sc: dict, sel: list[int], as_json: bool) -> int:
    compute = arg_after(argv, "-C", "--compute-partition")
    memory = arg_after(argv, "-M", "--memory-partition")
    if not compute and not memory:
        sys.stderr.write(
            "fake amd-smi: only `set --compute-partition/--memory-partition` is emulated\n"
        )
        return 2
    all_ = gpus(sc)
    sel = sel or list(range(len(all_)))
    results = []
    for i in sel:
        g = all_[i]
        settle(g)
        if compute:
            if compute.upper() not in COMPUTE_MODES:
                out = f"[AMDSMI_STATUS_INVAL] Unable to set accelerator partition to {compute}"
            else:
                g["compute_partition"] = compute.upper()
                out = f"Successfully set accelerator partition to {compute.upper()}"
            results.append({"gpu": i, "accelerator_partition": out})
        if memory:
            if memory.upper() not in MEMORY_MODES:
                out = f"[AMDSMI_STATUS_INVAL] Unable to set memory partition to {memory}"
            else:
                g["memory_partition_pending"] = memory.upper()
                out = (
                    f"Successfully set memory partition to {memory.upper()}, use "
                    "`sudo modprobe -r amdgpu && sudo modprobe amdgpu` to reload driver"
                )
            results.append({"gpu": i, "memory_partition": out})
    sc["gpus"] = all_
    save(sc)
    if as_json:
        print(json.dumps(results, indent=4))
    else:
        for r in results:
            key = next(k for k in r if k != "gpu")
            print(f"GPU: {r['gpu']}\n    {key.upper()}: {r[key]}")
    return 0


def reload_driver(sc: dict) -> int:
    """The amdgpu driver reloads: pending memory partitions take effect."""
    if any(g.get("in_use") for g in gpus(sc)):
        print("[AMDSMI_STATUS_AMDGPU_RESTART_ERR] Unable to reload driver: GPU(s) in use")
        return 1
    all_ = gpus(sc)
    for g in all_:
        settle(g)
        if g.get("memory_partition_pending"):
            g["memory_partition"] = g.pop("memory_partition_pending")
        g["driver_reloads"] = int(g.get("driver_reloads", 0)) + 1
    sc["gpus"] = all_
    save(sc)
    print("Successfully reloaded AMD GPU driver")
    return 0


def show_partition(sc: dict, sel: list[int], as_json: bool) -> int:
    rows = [
        {
            "gpu_id": i,
            "memory": partition_of(g)["memory"],
            "accelerator_type": partition_of(g)["compute"],
            "accelerator_profile_index": "N/A",
            "partition_id": 0,
        }
        for i, g in enumerate(gpus(sc))
        if not sel or i in sel
    ]
    if as_json:
        print(json.dumps({"current_partition": rows}, indent=4))
    else:
        print("CURRENT_PARTITION:")
        print(
            f"{'GPU_ID':<8}{'MEMORY':<8}{'ACCELERATOR_TYPE':<18}{'ACCELERATOR_PROFILE_INDEX':<27}PARTITION_ID"
        )
        for r in rows:
            print(
                f"{r['gpu_id']:<8}{r['memory']:<8}{r['accelerator_type']:<18}"
                f"{r['accelerator_profile_index']:<27}{r['partition_id']}"
            )
    return 0


# ----------------------------------------------------------------- rocm-smi
def rocm_smi(argv: list[str], sc: dict | None) -> int:
    if sc is None or sc.get("driver_loaded") is False:
        print("ERROR:root:Driver not initialized (amdgpu not found in modules)")
        return 1
    maybe_hang(sc, ["rocm-smi"])
    maybe_fail(sc, ["rocm-smi"])
    devs = list(enumerate(gpus(sc)))
    if "--json" in argv:
        data: dict = {}
        for i, g in devs:
            card = data.setdefault(f"card{i}", {})
            if "--showbus" in argv or "--showallinfo" in argv:
                card["PCI Bus"] = bdf(i, g).upper()
            if "--showid" in argv or "--showallinfo" in argv:
                card["Device ID"] = g.get("device_id", "0x74a1")
            if "--showxgmierr" in argv or "--showallinfo" in argv:
                x = g.get("xgmi_err", 0)
                if isinstance(x, int):
                    card["XGMI Error count"] = str(x)
        print(json.dumps(data))
        return 0
    width = 80
    if "--showrasinfo" in argv:
        print(" RAS Info ".center(width, "="))
        for i, g in devs:
            print(f"\nGPU[{i}]: \tRAS INFO")
            headers = ["         Block", "     Status  ", "uncorrectable err", "correctable err"]
            print("  ".join(headers) + "  ")
            if g.get("ras_supported", True) is False:
                continue
            for name, b in ecc_blocks(g).items():
                row = [name, "ENABLED", b["uncorrectable_count"], b["correctable_count"]]
                print(
                    "  ".join(f"{c!s:>{len(h)}}" for c, h in zip(row, headers, strict=True)) + "  "
                )
            print("_" * width)
        print("=" * width)
        return 0
    print(" ROCm System Management Interface ".center(width, "="))
    print(" Concise Info ".center(width, "="))
    for i, g in devs:
        print(f"{i}       {bdf(i, g)}   {g.get('hotspot_c', 41)}.0°C  {g.get('power_w', 140)}.0W")
    print(" End of ROCm SMI Log ".center(width, "="))
    return 0


# ----------------------------------------------------------------- rocminfo
def rocminfo(argv: list[str], sc: dict | None) -> int:
    if sc is None or sc.get("driver_loaded") is False:
        print("ROCk module is NOT loaded, possibly no GPU devices")
        return 1
    maybe_hang(sc, ["rocminfo"])
    maybe_fail(sc, ["rocminfo"])

    def field(name: str, value) -> str:
        return f"  {name + ':':<25}{value!s:<35}"

    lines = [
        f"ROCk module version {sc.get('rock_version', '6.12.12')} is loaded",
        "=====================    ",
        "HSA System Attributes    ",
        "=====================    ",
        "Runtime Version:         1.15",
        "Runtime Ext Version:     1.7",
        "System Timestamp Freq.:  1000.000000MHz",
        "Sig. Max Wait Duration:  18446744073709551615 (0xFFFFFFFFFFFFFFFF) (timestamp count)",
        "Machine Model:           LARGE                              ",
        "System Endianness:       LITTLE                             ",
        "Mwaitx:                  DISABLED",
        "XNACK enabled:           NO",
        "DMAbuf Support:          YES",
        "VMM Support:             YES",
        "",
        "==========               ",
        "HSA Agents               ",
        "==========               ",
    ]
    agent = 0
    cpus = sc.get("cpus", ["AMD EPYC 9654 96-Core Processor"] * 2)
    for node, cpu in enumerate(cpus):
        agent += 1
        lines += [
            "*******                  ",
            f"Agent {agent:<17}",
            "*******                  ",
            field("Name", cpu),
            field("Uuid", "CPU-XX"),
            field("Marketing Name", cpu),
            field("Vendor Name", "CPU"),
            field("Feature", "None specified"),
            field("Profile", "FULL_PROFILE"),
            field("Float Round Mode", "NEAR"),
            field("Max Queue Number", "0(0x0)"),
            field("Queue Min Size", "0(0x0)"),
            field("Queue Max Size", "0(0x0)"),
            field("Queue Type", "MULTI"),
            field("Node", node),
            field("Device Type", "CPU"),
            field("Compute Unit", 192),
            "  ISA Info:                ",
            "",
        ]
    for i, g in enumerate(gpus(sc)):
        if g.get("agent", True) is False:
            continue  # the GPU fell out of the HSA topology: no agent for it
        agent += 1
        busno = int(bdf(i, g).split(":")[1], 16)
        gfx = g.get("gfx", "gfx942")
        lines += [
            "*******                  ",
            f"Agent {agent:<17}",
            "*******                  ",
            field("Name", gfx),
            field("Uuid", f"GPU-{0x5C2E9A3D11FF0000 + i:016x}"),
            field("Marketing Name", g.get("market_name", "AMD Instinct MI300X")),
            field("Vendor Name", "AMD"),
            field("Feature", "KERNEL_DISPATCH"),
            field("Profile", "BASE_PROFILE"),
            field("Float Round Mode", "NEAR"),
            field("Max Queue Number", "128(0x80)"),
            field("Queue Min Size", "64(0x40)"),
            field("Queue Max Size", "131072(0x20000)"),
            field("Queue Type", "MULTI"),
            field("Node", len(cpus) + i),
            field("Device Type", "GPU"),
            field(
                "Chip ID",
                f"{int(g.get('device_id', '0x74a1'), 16)}({g.get('device_id', '0x74a1')})",
            ),
            field("BDFID", busno << 8),
            field("Internal Node ID", len(cpus) + i),
            field("Compute Unit", 304),
            field("SIMDs per CU", 4),
            "  ISA Info:                ",
            "    ISA 1                    ",
            f"      Name:                    amdgcn-amd-amdhsa--{gfx}:sramecc+:xnack-",
            "",
        ]
    lines.append("*** Done ***             ")
    print("\n".join(lines))
    return 0


def main() -> int:
    tool = os.path.basename(sys.argv[0])
    sc = load()
    if tool == "rocm-smi":
        return rocm_smi(sys.argv[1:], sc)
    if tool == "rocminfo":
        return rocminfo(sys.argv[1:], sc)
    return amd_smi(sys.argv[1:], sc)


if __name__ == "__main__":
    sys.exit(main())
