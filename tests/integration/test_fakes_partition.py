"""The GPU stand-ins learn partitions: MIG in the fake NVML, nvidia-smi and mig-parted,
compute and memory partitions in the fake amd-smi. A reboot (a new boot id) or a GPU reset
loses what a real one loses, so a restore has something to restore."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")


@pytest.fixture
def env(tmp_path, fakes) -> dict:
    (tmp_path / "boot_id").write_text("boot-1\n")
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(fakes / "lib"),
        "FLEETMEDIC_FAKE_NVML": str(tmp_path / "nvml.json"),
        "FLEETMEDIC_FAKE_AMD": str(tmp_path / "amd.json"),
        "FLEETMEDIC_FAKE_BOOT_ID": str(tmp_path / "boot_id"),
        "PATH": f"{fakes / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def run(env, *argv: str, ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30)
    if ok:
        assert p.returncode == 0, (argv, p.stdout, p.stderr)
    return p


def reboot(env, n: int) -> None:
    Path(env["FLEETMEDIC_FAKE_BOOT_ID"]).write_text(f"boot-{n}\n")


def nvml_mig(env) -> list[tuple[list[int], list[tuple[int, int, str]]]]:
    """Per GPU: [current, pending] MIG mode and (GI id, CI id, UUID) of each MIG device, as
    the real pynvml reads them from the fake library (in a child: the library reads the
    scenario named by the environment)."""
    code = (
        "import json, pynvml as n\n"
        "n.nvmlInit()\n"
        "out = []\n"
        "for i in range(n.nvmlDeviceGetCount()):\n"
        "    h = n.nvmlDeviceGetHandleByIndex(i)\n"
        "    devs = []\n"
        "    for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):\n"
        "        try:\n"
        "            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)\n"
        "        except n.NVMLError:\n"
        "            break\n"
        "        gi = n.nvmlDeviceGetGpuInstanceId(m)\n"
        "        devs.append([gi, n.nvmlDeviceGetComputeInstanceId(m), n.nvmlDeviceGetUUID(m)])\n"
        "    out.append([list(n.nvmlDeviceGetMigMode(h)), devs])\n"
        "print(json.dumps(out))\n"
    )
    import sys

    p = run(env, sys.executable, "-c", code)
    return [(mode, [tuple(d) for d in devs]) for mode, devs in json.loads(p.stdout)]


def write(env, key: str, data: dict) -> None:
    Path(env[key]).write_text(json.dumps(data))


CONFIG = {
    "version": "v1",
    "mig-configs": {
        "current": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    },
}


def test_mig_parted_applies_a_layout_that_nvml_and_nvidia_smi_then_show(env, tmp_path):
    write(env, "FLEETMEDIC_FAKE_NVML", {"gpus": [{}, {}]})
    assert [m for m, _ in nvml_mig(env)] == [[0, 0], [0, 0]]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG))
    assert (
        run(
            env, "nvidia-mig-parted", "assert", "-f", str(cfg), "-c", "current", ok=False
        ).returncode
        == 1
    )
    run(env, "nvidia-mig-parted", "apply", "-f", str(cfg), "-c", "current")
    p = run(env, "nvidia-mig-parted", "assert", "-f", str(cfg), "-c", "current")
    assert p.stdout.strip() == "Selected MIG configuration currently applied"
    mig = nvml_mig(env)
    assert [m for m, _ in mig] == [[1, 1], [1, 1]]
    assert [len(d) for _, d in mig] == [2, 2]
    assert [(gi, ci) for gi, ci, _ in mig[0][1]] == [(1, 0), (2, 0)]
    listed = run(env, "nvidia-smi", "-L").stdout
    for _, devs in mig:
        for _, _, uuid in devs:
            assert uuid.startswith("MIG-") and f"(UUID: {uuid})" in listed
    lgi = run(env, "nvidia-smi", "mig", "-lgi", "-lci").stdout
    assert "| GPU instances:" in lgi and "| Compute instances:" in lgi
    assert lgi.count("MIG 3g.40gb") == 8  # 2 GPUs x 2 GIs, each listed as GI and CI
    assert "0:4" in lgi and "4:4" in lgi  # the two 3g.40gb placements of an H100
    exported = json.loads(run(env, "nvidia-mig-parted", "export", "-o", "json").stdout)
    assert exported == CONFIG
    assert "mig-devices:\n      3g.40gb: 2" in run(env, "nvidia-mig-parted", "export").stdout
    calls = (tmp_path / "mig-parted-calls.jsonl").read_text().splitlines()
    assert [json.loads(c)["changed"] for c in calls] == [True]
    run(env, "nvidia-mig-parted", "apply", "-f", str(cfg), "-c", "current")
    calls = (tmp_path / "mig-parted-calls.jsonl").read_text().splitlines()
    assert [json.loads(c)["changed"] for c in calls] == [True, False]  # applied: no change


def test_a_reboot_loses_the_instances_and_on_hopper_the_mode(env, tmp_path):
    write(env, "FLEETMEDIC_FAKE_NVML", {"gpus": [{}, {"name": "NVIDIA A100-SXM4-40GB"}]})
    run(env, "nvidia-smi", "-mig", "1")
    run(env, "nvidia-smi", "mig", "-cgi", "9", "-C", "-i", "0")
    run(env, "nvidia-smi", "mig", "-cgi", "3g.20gb,2g.10gb", "-C", "-i", "1")
    assert [len(d) for _, d in nvml_mig(env)] == [1, 2]
    reboot(env, 2)
    mig = nvml_mig(env)
    assert mig == [([0, 0], []), ([1, 1], [])]  # the A100 keeps its mode in the InfoROM
    p = run(env, "nvidia-smi", "mig", "-lgi", ok=False)
    assert p.returncode == 6 and "No GPU instances found" in p.stdout
    out = run(
        env, "nvidia-smi", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader"
    )
    assert out.stdout.splitlines() == ["Disabled, Disabled", "Enabled, Enabled"]


def test_a_gpu_reset_destroys_the_instances(env, tmp_path):
    write(env, "FLEETMEDIC_FAKE_NVML", {"gpus": [{"persistence_mode": 0}]})
    run(env, "nvidia-smi", "-mig", "1")
    run(env, "nvidia-smi", "mig", "-cgi", "19,19,19", "-C")
    assert len(nvml_mig(env)[0][1]) == 3
    run(env, "nvidia-smi", "-r", "-i", "0")
    assert nvml_mig(env) == [([1, 1], [])]


def test_mig_mode_cannot_be_disabled_under_instances(env):
    write(env, "FLEETMEDIC_FAKE_NVML", {"gpus": [{}]})
    run(env, "nvidia-smi", "-mig", "1")
    run(env, "nvidia-smi", "mig", "-cgi", "7g.80gb", "-C")
    p = run(env, "nvidia-smi", "-mig", "0", ok=False)
    assert p.returncode != 0 and "In use by another client" in p.stdout
    assert run(env, "nvidia-smi", "mig", "-cgi", "19", ok=False).returncode != 0  # no room


def amd_partitions(env) -> list[tuple[str, str]]:
    data = json.loads(run(env, "amd-smi", "static", "--partition", "--json").stdout)
    return [
        (g["partition"]["compute_partition"], g["partition"]["memory_partition"])
        for g in data["gpu_data"]
    ]


def test_amd_compute_partition_applies_at_once_memory_partition_at_driver_reload(env):
    write(env, "FLEETMEDIC_FAKE_AMD", {"gpus": [{}, {}]})
    assert amd_partitions(env) == [("SPX", "NPS1")] * 2
    p = run(env, "amd-smi", "set", "-g", "0", "1", "--compute-partition", "CPX")
    assert "Successfully set accelerator partition to CPX" in p.stdout
    p = run(env, "amd-smi", "set", "-g", "0", "1", "--memory-partition", "NPS4")
    assert "reload driver" in p.stdout
    assert amd_partitions(env) == [("CPX", "NPS1")] * 2
    run(env, "amd-smi", "reset", "--reload-driver")
    assert amd_partitions(env) == [("CPX", "NPS4")] * 2
    rows = json.loads(run(env, "amd-smi", "partition", "--current", "--json").stdout)
    assert [(r["accelerator_type"], r["memory"]) for r in rows["current_partition"]] == [
        ("CPX", "NPS4")
    ] * 2


@pytest.mark.parametrize("how", ["reboot", "reset"])
def test_amd_partitions_are_lost_by_a_reboot_or_a_reset(env, how):
    write(env, "FLEETMEDIC_FAKE_AMD", {"gpus": [{}, {}]})
    run(env, "amd-smi", "set", "-g", "all", "--compute-partition", "CPX")
    run(env, "amd-smi", "set", "-g", "all", "--memory-partition", "NPS4")
    run(env, "amd-smi", "reset", "--reload-driver")
    if how == "reboot":
        reboot(env, 7)
    else:
        out = run(env, "amd-smi", "reset", "--gpureset", "-g", "0").stdout
        assert "Successfully reset GPU" in out
    assert amd_partitions(env) == [("SPX", "NPS1")] * 2


def avg_busbw(out: str) -> float:
    line = next(ln for ln in out.splitlines() if ln.startswith("# Avg bus bandwidth"))
    return float(line.split(":")[1])


@pytest.mark.parametrize("key", ["FLEETMEDIC_FAKE_NVML", "FLEETMEDIC_FAKE_AMD"])
def test_all_reduce_perf_reports_the_scenarios_bus_bandwidth(env, key):
    """The fake nccl-tests / rccl-tests program: its busbw follows the node's scenario, so
    a burn-in 40 % below the hardware profile can be made."""
    if key == "FLEETMEDIC_FAKE_AMD":
        Path(env["FLEETMEDIC_FAKE_NVML"]).unlink(missing_ok=True)  # an AMD node has none
    write(env, key, {"gpus": [{}, {}], "busbw_gbps": 400})
    out = run(env, "all_reduce_perf", "-b", "8G", "-e", "8G", "-f", "2", "-g", "2").stdout
    assert out.startswith("# nThread 1 nGpus 2 minBytes 8589934592 maxBytes 8589934592")
    assert out.count("#  Rank ") == 2 and "# Out of bounds values : 0 OK" in out
    healthy = avg_busbw(out)
    assert 395 < healthy <= 400
    write(env, key, {"gpus": [{}, {}], "busbw_gbps": 240})  # 40 % below
    slow = avg_busbw(run(env, "all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "2").stdout)
    assert abs(slow / healthy - 0.6) < 0.01


def test_all_reduce_perf_without_a_driver_fails(env):
    p = run(env, "all_reduce_perf", ok=False)
    assert p.returncode == 1 and "Test failure" in p.stdout
