"""``fleetmedic gpus``'s readers (checks/identity.py): NVML's worker lines, amd-smi's JSON as
the fake amd-smi prints it, and the driver's naming lines in the kernel log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleetmedic.checks import identity
from fleetmedic.checks.nvidia import parse
from fleetmedic.checks.proc import Completed
from fleetmedic.model.gpufacts import GpuFacts, GpuReport

ROOT = Path(__file__).resolve().parents[3]
AMD_FAKE = ROOT / "tests" / "fakes" / "amd" / "amdfake.py"


def worker(lines: list[dict]) -> str:
    return "\n".join(json.dumps(x) for x in [*lines, {"op": "done"}])


def test_nvml_readings_become_identities_signals_and_rma_facts():
    snap = parse(
        worker(
            [
                {"op": "init", "value": True},
                {"op": "driver_version", "value": "550.90.07"},
                {"op": "count", "value": 2},
                {"op": "handle", "gpu": 0, "value": True},
                {"op": "name", "gpu": 0, "value": "NVIDIA H100 80GB HBM3"},
                {"op": "uuid", "gpu": 0, "value": "GPU-aa"},
                {"op": "pci_bus_id", "gpu": 0, "value": "00000000:18:00.0"},
                {"op": "serial", "gpu": 0, "value": "1652000000100"},
                {"op": "board_part_number", "gpu": 0, "value": "692-2G520-0200-000"},
                {"op": "inforom_image_version", "gpu": 0, "value": "G520.0200.00.05"},
                {"op": "vbios_version", "gpu": 0, "value": "96.00.99.00.01"},
                {"op": "ecc_volatile_uncorrected", "gpu": 0, "value": 2},
                {"op": "retired_pages_dbe", "gpu": 0, "value": 1},
                {
                    "op": "remapped_rows",
                    "gpu": 0,
                    "value": {
                        "correctable": 0,
                        "uncorrectable": 8,
                        "pending": False,
                        "failure": True,
                    },
                },
                {"op": "handle", "gpu": 1, "error": "GPU_IS_LOST", "code": 15, "message": "lost"},
            ]
        )
    )
    gpus, problems = identity.from_nvml(snap)
    assert problems == []
    g0, g1 = gpus
    assert (g0.index, g0.pci, g0.serial, g0.uid) == (0, "0000:18:00.0", "1652000000100", "GPU-aa")
    assert g0.signals == ("ecc_uncorrected", "row_remap_failure")
    assert g0.rma["inforom_image_version"] == "G520.0200.00.05"
    assert g0.rma["vbios_version"] == "96.00.99.00.01"
    assert g0.rma["retired_pages"]["double_bit_ecc"] == 1
    assert g0.rma["remapped_rows"]["uncorrectable"] == 8
    assert (g1.index, g1.serial, g1.uid, g1.signals) == (1, "", "", ("lost",))
    assert g1.rma["errors"] == ["GPU_IS_LOST"]


def test_a_hung_nvml_is_a_problem_named_not_a_healthy_gpu():
    run = Completed(("python",), None, worker([])[:-15], "", 15.0, timed_out=True)
    snap = parse(
        json.dumps({"op": "init", "value": True}) + "\n" + json.dumps({"begin": "count"}), run, 15
    )
    gpus, problems = identity.from_nvml(snap)
    assert gpus == ()
    assert any("did not return" in p for p in problems) and any("count" in p for p in problems)


def amd_runs(tmp_path: Path, scenario: dict) -> dict[str, Completed]:
    """The jobs of identity.AMD_JOBS, run through the fake amd-smi (its real formats)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "amd-smi"
    if not link.exists():
        link.symlink_to(AMD_FAKE)
    (tmp_path / "amd.json").write_text(json.dumps(scenario))
    env = {**os.environ, "FLEETMEDIC_FAKE_AMD": str(tmp_path / "amd.json")}
    out = {}
    for job, argv in identity.AMD_JOBS.items():
        p = subprocess.run(
            [sys.executable, str(link), *argv[1:]], env=env, capture_output=True, text=True
        )
        out[job] = Completed(argv, p.returncode, p.stdout, p.stderr, 0.1)
    return out


def test_amd_smi_gives_serial_unique_id_ras_blocks_and_bad_pages(tmp_path):
    runs = amd_runs(
        tmp_path,
        {
            "gpus": [
                {"serial": "PCB000111000", "asic_serial": "0x5C2E00000000AAAA"},
                {
                    "serial": "PCB000111001",
                    "asic_serial": "0x5C2E00000000BBBB",
                    "ecc_blocks": {"UMC": {"uncorrectable": 3}},
                    "bad_pages": {"retired": 2, "unreservable": 1},
                },
            ]
        },
    )
    gpus, problems = identity.from_amd(runs)
    assert problems == []
    g0, g1 = gpus
    assert (g0.serial, g0.uid, g0.pci) == ("PCB000111000", "0x5C2E00000000AAAA", "0000:05:00.0")
    assert g0.signals == () and g0.model == "AMD Instinct MI300X"
    assert (g1.serial, g1.uid) == ("PCB000111001", "0x5C2E00000000BBBB")
    assert g1.signals == ("ecc_uncorrected", "bad_pages_unreservable")
    assert g1.rma["ras_blocks"]["UMC"]["uncorrectable_count"] == 3
    assert g1.rma["bad_pages"] == {"retired": 2, "pending": 0, "un_res": 1}
    assert g1.rma["vbios"]["version"] == "022.040.003.043.000001"
    assert g1.rma["uuid"]


def test_amd_defaults_differ_between_nodes_as_real_serials_do(tmp_path):
    """The fake's default serials come from the node's machine id: two nodes' GPU 0 are
    two GPUs (else every test node's GPU 0 would share one history)."""
    [g] = identity.from_amd(amd_runs(tmp_path, {"gpus": [{}]}))[0]
    assert g.serial.startswith("PCB") and g.uid.startswith("0x") and len(g.uid) == 18


def test_a_failed_amd_smi_is_named_not_read_as_no_gpus(tmp_path):
    runs = amd_runs(tmp_path, {"driver_loaded": False})
    gpus, problems = identity.from_amd(runs)
    assert gpus == () and len(problems) == len(identity.AMD_JOBS)
    assert all("exit 1" in p for p in problems)


UUID = "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375"
KERN = "".join(
    f"Nov 28 {t} n1 kernel: {line}\n"
    for t, line in (
        ("10:00:00", "[    0.000000] Linux version 6.1.0-old"),
        ("10:00:01", "NVRM: GPU at PCI:0000:28:00: GPU-0ld"),
        ("11:00:00", "[    0.000000] Linux version 6.1.0-fleetmedic-test"),
        ("11:00:04", "[    4.210000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07"),
        ("11:30:00", f"[ 1800.000000] NVRM: GPU at PCI:0000:28:00: {UUID}"),
        ("11:30:00", "[ 1800.000001] NVRM: GPU Board Serial Number: 1650423013443"),
        (
            "11:30:00",
            "[ 1800.000002] NVRM: Xid (PCI:0000:28:00): 79, pid=4242, name=python3, "
            "GPU has fallen off the bus.",
        ),
    )
)


def test_the_driver_names_a_gpu_before_its_first_xid_and_that_names_a_lost_one(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(KERN)
    named = identity.kernel_identities(str(log))
    assert named == {"0000:28:00": ("GPU-efbdfde9-5798-a6e7-4c46-12518fa15375", "1650423013443")}
    lost = GpuFacts(1, signals=("lost",))
    ok = GpuFacts(0, "0000:18:00.0", "S0", "GPU-0")
    [a, b] = identity.named_by_the_driver((ok, lost), named)
    assert a == ok
    assert (b.serial, b.uid, b.pci) == (
        "1650423013443",
        "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
        "0000:28:00.0",
    )
    faults, problems = identity.kernel_faults(str(log))
    assert problems == [] and [(f.rule, f.pci) for f in faults] == [("xid.79", "0000:28:00")]


def test_the_report_round_trips_and_rejects_what_is_not_one():
    rep = GpuReport("nvidia", (GpuFacts(0, "0000:18:00.0", "S", "U", "H100", ("lost", "bogus")),))
    back = GpuReport.from_json(json.loads(json.dumps(rep.to_json())))
    assert back is not None and back.gpus[0].signals == ("lost",), "unknown signals dropped"
    assert GpuReport.from_json({"gpus": "x"}) is None and GpuReport.from_json(None) is None
    assert GpuFacts.from_json({"index": 0, "serial": "N/A", "uid": "[N/A]"}).serial == ""
