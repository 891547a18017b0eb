"""The checks against the hardware stand-ins, through the real code paths.

- NVIDIA: the real pynvml (nvidia-ml-py) loads tests/fakes/build/lib/libnvidia-ml.so.1
  (via LD_LIBRARY_PATH) in the checks' own NVML reader child process.
- AMD: the fake amd-smi / rocm-smi / rocminfo executables, found on PATH.
- Network: a real iperf3 server on loopback.
Scenarios are files, exactly as on a test-fleet node (/var/lib/fleetmedic-test/).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetmedic.checks import amd, base, network, nvidia, runner
from fleetmedic.checks.config import CheckConfig, NetworkConfig
from tests.harness.agentenv import h100
from tests.harness.loadscale import scaled


class Hardware:
    """Scenario files plus the environment a node's agent would have."""

    def __init__(self, tmp: Path, build: Path):
        self.nvml = tmp / "nvml.json"
        self.amd = tmp / "amd.json"
        self.tmp = tmp
        self.env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(build / "lib"),
            "FLEETMEDIC_FAKE_NVML": str(self.nvml),
            "FLEETMEDIC_FAKE_AMD": str(self.amd),
            "PATH": f"{build / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }

    def set_nvml(self, doc: dict) -> None:
        self.nvml.write_text(json.dumps(doc))

    def set_amd(self, doc: dict) -> None:
        self.amd.write_text(json.dumps(doc))


@pytest.fixture
def hw(tmp_path, fakes) -> Hardware:
    return Hardware(tmp_path, fakes)


def by_name(results):
    return {r.name: r for r in results}


def nv(hw, cfg=None):
    return by_name(
        nvidia.run(cfg or CheckConfig(vendor="nvidia", expected_gpus=8, timeout=5), hw.env)
    )


# =================================================================== NVIDIA
def test_healthy_node_through_real_pynvml(hw):
    hw.set_nvml(h100())
    res = nv(hw)
    assert {n: r.status for n, r in res.items()} == {
        n: "ok" for n in nvidia.nvidia_rules.CHECK_NAMES
    }
    assert res["nvidia.driver"].evidence["driver_version"] == "550.90.07"
    assert res["nvidia.nvlink"].evidence["gpus"]["7"]["links"] == 18
    assert res["nvidia.pcie"].summary == "PCIe links at full width and speed on 8 GPU(s)"


@pytest.mark.parametrize(
    "fault,check,fragment,action",
    [
        ({"ecc_volatile_uncorrected": 4}, "nvidia.ecc", "4 volatile uncorrectable ECC", None),
        (
            {"retired_pages_dbe": 2, "retired_pages_pending": True},
            "nvidia.retired_pages",
            "retirement pending",
            None,
        ),
        (
            {"remapped_rows_uncorrectable": 1, "remapped_rows_pending": True},
            "nvidia.remapped_rows",
            "remap pending",
            None,
        ),
        ({"remapped_rows_failure": True}, "nvidia.remapped_rows", "row remapping failed", "manual"),
        ({"recovery_action": 2}, "nvidia.recovery_action", "NODE_REBOOT", None),
        ({"pcie_width": 4}, "nvidia.pcie", "link width x4 of x16", None),
        ({"pcie_gen": 3, "clocks_event_reasons": 0}, "nvidia.pcie", "link Gen3 of Gen5", None),
        (
            {"nvlink": [1] * 10 + [0] + [1] * 7},
            "nvidia.nvlink",
            "NVLink link 10 down (17/18 up)",
            None,
        ),
        ({"clocks_event_reasons": 0x40}, "nvidia.slowdown", "HwThermalSlowdown", None),
        ({"clocks_event_reasons": 0x80}, "nvidia.slowdown", "HwPowerBrakeSlowdown", None),
        ({"persistence_mode": 0}, "nvidia.persistence", "persistence mode is off", None),
    ],
)
def test_each_fault_through_real_pynvml(hw, fault, check, fragment, action):
    hw.set_nvml(h100(**{"5": fault}))
    res = nv(hw)
    r = res[check]
    assert r.status == "problem" and fragment in r.summary, r
    assert r.summary.startswith("GPU 5 (00000000:68:00.0)")
    assert r.action == action
    assert [n for n, x in res.items() if x.status != "ok"] == [check]


def test_idle_gpu_may_lower_its_link_generation(hw):
    hw.set_nvml(h100(**{"2": {"pcie_gen": 1, "clocks_event_reasons": 0x1}}))
    r = nv(hw)["nvidia.pcie"]
    assert r.status == "ok" and r.evidence["gpus"]["2"]["idle"] is True


def test_missing_gpu(hw):
    hw.set_nvml(h100(7))
    r = nv(hw)["nvidia.count"]
    assert r.status == "problem" and r.summary == "7 of 8 expected GPUs visible"


@pytest.mark.parametrize(
    "call",
    [
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetRetiredPages_v2",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMaxPcieLinkWidth",
    ],
)
def test_not_supported_is_never_a_problem(hw, call):
    hw.set_nvml({**h100(), "errors": {call: "NOT_SUPPORTED"}})
    res = nv(hw)
    assert {r.status for r in res.values()} == {"ok"}, {n: r.summary for n, r in res.items()}
    assert any(not r.applicable for r in res.values())


def test_pre_a100_gpu_without_row_remapping_or_recovery_field(hw):
    gpus = [
        {
            "name": "Tesla V100-SXM2-32GB",
            "remapped_rows_supported": 0,
            "field_errors": {"230": "NOT_SUPPORTED"},
            "retired_pages_sbe": 1,
        }
        for _ in range(8)
    ]
    hw.set_nvml({"gpus": gpus})
    res = nv(hw)
    assert res["nvidia.remapped_rows"].status == "ok" and not res["nvidia.remapped_rows"].applicable
    assert (
        res["nvidia.recovery_action"].status == "ok"
        and not res["nvidia.recovery_action"].applicable
    )
    assert res["nvidia.nvlink"].status == "ok" and not res["nvidia.nvlink"].applicable
    assert res["nvidia.retired_pages"].status == "ok" and res["nvidia.retired_pages"].applicable


@pytest.mark.parametrize(
    "fault",
    [
        {"lost": True},
        {"errors": {"nvmlDeviceGetHandleByIndex_v2": "GPU_IS_LOST"}},
        {"errors": {"nvmlDeviceGetRemappedRows": "GPU_IS_LOST"}},
    ],
)
def test_gpu_is_lost_is_a_problem(hw, fault):
    hw.set_nvml(h100(**{"3": fault}))
    res = nv(hw)
    assert (
        res["nvidia.driver"].status == "problem"
        and "GPU 3: GPU is lost" in res["nvidia.driver"].summary
    )
    assert base.exit_code(res.values()) == 1


def test_nvml_timeout_return_is_unknown(hw):
    hw.set_nvml(h100(**{"1": {"errors": {"nvmlDeviceGetTotalEccErrors": "TIMEOUT"}}}))
    res = nv(hw)
    assert res["nvidia.ecc"].status == "unknown" and "TIMEOUT" in res["nvidia.ecc"].summary
    assert base.exit_code(res.values()) == 2


def test_no_scenario_file_is_driver_not_loaded(hw):
    res = nv(hw)  # nothing written
    assert res["nvidia.driver"].status == "problem"
    assert res["nvidia.driver"].summary == "NVML init failed: NVIDIA kernel driver not loaded"


def test_library_not_installed(hw, tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this machine")
    hw.set_nvml(h100())
    env = {**hw.env, "LD_LIBRARY_PATH": str(tmp_path)}
    res = by_name(nvidia.run(CheckConfig(vendor="nvidia", timeout=5), env))
    assert (
        res["nvidia.driver"].status == "problem"
        and "libnvidia-ml.so.1 not found" in res["nvidia.driver"].summary
    )


@pytest.mark.parametrize(
    "hang,where",
    [
        ({"hang": "nvmlInitWithFlags"}, "nvmlInitWithFlags"),
        ({"hang": "nvmlDeviceGetCount_v2"}, "nvmlDeviceGetCount_v2"),
        ({"gpus_hang": (6, ["nvmlDeviceGetRemappedRows"])}, "nvmlDeviceGetRemappedRows on GPU 6"),
    ],
)
def test_hung_driver_call_gives_unknown_within_the_timeout(hw, hang, where):
    doc = h100()
    if "gpus_hang" in hang:
        i, calls = hang.pop("gpus_hang")
        doc["gpus"][i]["hang"] = calls
    hw.set_nvml({**doc, **hang})
    start = time.monotonic()
    res = by_name(nvidia.run(CheckConfig(vendor="nvidia", expected_gpus=8, timeout=2), hw.env))
    elapsed = time.monotonic() - start
    assert elapsed < 2 + 1.5, elapsed
    assert res["nvidia.driver"].status == "unknown"
    assert (
        where in res["nvidia.driver"].summary
        and "did not return within 2s" in res["nvidia.driver"].summary
    )
    assert base.overall(res.values()) == "unknown"
    assert not any(r.status == "ok" and r.name in ("nvidia.remapped_rows",) for r in res.values())


def test_a_slow_call_within_the_timeout_is_fine(hw):
    hw.set_nvml({**h100(2), "hang": "nvmlDeviceGetPersistenceMode", "hang_seconds": 0.2})
    res = nv(hw, CheckConfig(vendor="nvidia", expected_gpus=2, timeout=5))
    assert {r.status for r in res.values()} == {"ok"}


def test_scenario_is_reread_at_every_init(hw):
    hw.set_nvml(h100())
    assert nv(hw)["nvidia.ecc"].status == "ok"
    hw.set_nvml(h100(**{"0": {"ecc_volatile_uncorrected": 1}}))
    assert nv(hw)["nvidia.ecc"].status == "problem"
    hw.set_nvml(h100())
    assert nv(hw)["nvidia.ecc"].status == "ok"


# ====================================================================== AMD
def mi300x(n=8, fmt=None, **per_gpu):
    gpus = [{"market_name": "AMD Instinct MI300X", "gfx": "gfx942"} for _ in range(n)]
    for i, extra in per_gpu.items():
        gpus[int(i)].update(extra)
    return {"gpus": gpus, **({"amd_smi_format": fmt} if fmt else {})}


def amd_run(hw, cfg=None, env=None):
    return by_name(
        amd.run(cfg or CheckConfig(vendor="amd", expected_gpus=8, timeout=10), env or hw.env)
    )


@pytest.mark.parametrize("fmt", [None, "list"])
def test_amd_healthy(hw, fmt):
    hw.set_amd(mi300x(fmt=fmt))
    res = amd_run(hw)
    assert {n: r.status for n, r in res.items()} == {n: "ok" for n in amd.CHECK_NAMES}, {
        n: r.summary for n, r in res.items()
    }


@pytest.mark.parametrize(
    "fault,check,fragment,action",
    [
        ({"ecc_uncorrectable": 3}, "amd.ecc", "3 uncorrectable ECC", None),
        ({"ecc_blocks": {"GFX": {"uncorrectable": 1}}}, "amd.ecc", "blocks GFX", None),
        (
            {"bad_pages": {"retired": 4, "pending": 1}},
            "amd.bad_pages",
            "1 bad page(s) pending",
            None,
        ),
        (
            {"bad_pages": {"retired": 4, "unreservable": 2}},
            "amd.bad_pages",
            "2 unreservable",
            "manual",
        ),
        ({"pcie_width": 8}, "amd.pcie", "link width x8 of x16", None),
        ({"pcie_speed": 16}, "amd.pcie", "link speed 16 of 32 GT/s", None),
        ({"xgmi_err": 1}, "amd.xgmi", "XGMI link errors", None),
        ({"agent": False}, "amd.agents", "7 of 8 expected GPU agents", None),
    ],
)
def test_amd_faults(hw, fault, check, fragment, action):
    hw.set_amd(mi300x(**{"4": fault}))
    res = amd_run(hw)
    r = res[check]
    assert r.status == "problem" and fragment in r.summary, r
    assert r.action == action
    assert [n for n, x in res.items() if x.status != "ok"] == [check]


def test_amd_driver_not_loaded(hw):
    res = amd_run(hw)  # no scenario file: amdgpu not loaded
    assert (
        res["amd.agents"].status == "problem"
        and "ROCk module is NOT loaded" in res["amd.agents"].summary
    )
    assert base.exit_code(res.values()) == 1


def test_amd_smi_hang_is_unknown_within_the_timeout(hw):
    hw.set_amd({**mi300x(), "hang": "amd-smi metric"})
    start = time.monotonic()
    res = amd_run(hw, CheckConfig(vendor="amd", expected_gpus=8, timeout=2))
    assert time.monotonic() - start < 2 + 1.5
    assert res["amd.ecc"].status == "unknown" and "no answer within" in res["amd.ecc"].summary
    assert res["amd.agents"].status == "ok" and res["amd.count"].status == "ok"


def test_rocminfo_hang_is_unknown(hw):
    hw.set_amd({**mi300x(), "hang": ["rocminfo"]})
    res = amd_run(hw, CheckConfig(vendor="amd", expected_gpus=8, timeout=2))
    assert res["amd.agents"].status == "unknown"


def test_rocm_smi_fallback_when_amd_smi_is_absent(hw, fakes, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("rocm-smi", "rocminfo"):
        (bindir / tool).symlink_to(fakes / "bin" / tool)
    env = {**hw.env, "PATH": f"{bindir}:/usr/bin:/bin"}
    hw.set_amd(mi300x(**{"2": {"ecc_uncorrectable": 1, "xgmi_err": 2}}))
    res = amd_run(hw, env=env)
    assert res["amd.count"].status == "ok" and res["amd.count"].evidence["source"] == "rocm-smi"
    assert res["amd.ecc"].status == "problem" and res["amd.xgmi"].status == "problem"
    assert not res["amd.bad_pages"].applicable and not res["amd.pcie"].applicable


# =============================================================== auto vendor
def test_auto_picks_amd_when_there_is_no_nvml(hw, tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this machine")
    hw.set_amd(mi300x(2))
    env = {**hw.env, "LD_LIBRARY_PATH": str(tmp_path)}
    res = runner.gpu(CheckConfig(vendor="auto", timeout=5), env)
    assert [r.name for r in res] == list(amd.CHECK_NAMES)


def test_auto_with_nothing_installed_is_unknown(hw, tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this machine")
    env = {**hw.env, "LD_LIBRARY_PATH": str(tmp_path), "PATH": str(tmp_path)}
    (res,) = runner.gpu(CheckConfig(vendor="auto", timeout=5), env)
    assert res.name == "gpu.vendor" and res.status == "unknown"


def test_auto_on_a_node_with_both_stand_ins_follows_the_loaded_driver(hw):
    # the fake libnvidia-ml is present but has no scenario (driver not loaded); AMD has one
    hw.set_amd(mi300x(2))
    res = runner.gpu(CheckConfig(vendor="auto", expected_gpus=2, timeout=5), hw.env)
    assert [r.name for r in res] == list(amd.CHECK_NAMES) and base.overall(res) == "ok"


def test_auto_picks_nvidia(hw):
    hw.set_nvml(h100(2))
    res = runner.gpu(CheckConfig(vendor="auto", expected_gpus=2, timeout=5), hw.env)
    assert res[0].name == "nvidia.driver" and base.overall(res) == "ok"


# ================================================================== network
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_iperf3() -> None:
    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (scripts/setup.d/40-fakes.apt)", pytrace=False)


def wait_listening(port: int, timeout: float = 5) -> None:
    """Until something listens on TCP ``port`` (the iperf3 server is ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True
        ).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout:g}s")


@pytest.fixture(scope="module")
def iperf3_server():
    need_iperf3()
    port = free_port()
    proc = subprocess.Popen(
        ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_listening(port)
    yield f"127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def net(peers, min_mbps, **kw):
    cfg = CheckConfig(
        timeout=10, network=NetworkConfig(peers=tuple(peers), min_mbps=min_mbps, duration=1, **kw)
    )
    (r,) = network.run(cfg)
    return r


def test_throughput_above_threshold(iperf3_server):
    r = net([iperf3_server], 100)
    assert r.status == "ok" and r.category == "network" and r.evidence["mbps"] > 100


def test_throughput_below_threshold(iperf3_server):
    r = net([iperf3_server], 1e9)
    assert r.status == "problem" and "below 1e+09" in r.summary


def test_reverse_direction(iperf3_server):
    r = net([iperf3_server], 100, reverse=True)
    assert r.status == "ok" and r.evidence["direction"] == "peer->node"


def test_unreachable_peer_is_unknown_and_next_peer_is_tried(iperf3_server):
    closed = f"127.0.0.1:{free_port()}"
    assert net([closed], 1).status == "unknown"
    r = net([closed, iperf3_server], 1)
    assert (
        r.status == "ok"
        and r.evidence["peer"] == iperf3_server
        and "Connection refused" in r.evidence["tried"][0]
    )


# ====================================================================== CLI
def fleetmedic_check(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_exit_codes_end_to_end(hw, iperf3_server):
    common = [
        "--vendor",
        "nvidia",
        "--expected-gpus",
        "8",
        "--category",
        "gpu",
        "--category",
        "network",
        "--peer",
        iperf3_server,
        "--min-mbps",
        "10",
        "--network-duration",
        "1",
        "--timeout",
        "3",
    ]
    hw.set_nvml(h100())
    ok = fleetmedic_check(hw.env, "--json", *common)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["status"] == "ok" and {r["category"] for r in doc["results"]} == {"gpu", "network"}

    hw.set_nvml(h100(**{"1": {"remapped_rows_failure": True}}))
    bad = fleetmedic_check(hw.env, *common)
    assert (
        bad.returncode == 1
        and "[action: manual]" in bad.stdout
        and "overall: problem (exit 1)" in bad.stdout
    )

    hw.set_nvml({**h100(), "hang": "nvmlDeviceGetCount_v2"})  # hangs until killed
    start = time.monotonic()
    hung = fleetmedic_check(hw.env, "--json", *common)
    # cut at its 3 s timeout: 3 s, the interpreter's start and the 1 s network check on an
    # idle machine (5 s more), stretched by the load (a start took 9 s at load 15)
    assert hung.returncode == 2 and time.monotonic() - start < scaled(3 + 5)
    assert json.loads(hung.stdout)["status"] == "unknown"


# ==================================================== inside test-fleet nodes
# The same stand-ins as a node sees them: /usr/lib/libnvidia-ml.so.1 and
# /usr/local/bin/{amd-smi,rocm-smi,rocminfo} point into the read-only bind mount of
# tests/fakes/build, scenarios live in the node's /var/lib/fleetmedic-test, and
# `fleetmedic` is the node's own venv running this checkout.
def node_check(node, *args, timeout=60):
    p = node.ssh("fleetmedic check --json " + " ".join(args), check=False, timeout=timeout)
    try:
        return p.returncode, {r["name"]: r for r in json.loads(p.stdout)["results"]}
    except ValueError:
        raise AssertionError(f"rc={p.returncode} stdout={p.stdout!r} stderr={p.stderr!r}") from None


@pytest.fixture
def fleet_node(fleet, fakes):
    node = fleet.node(1)
    yield node
    for name in ("nvml.json", "amd.json"):
        (node.state_dir / name).unlink(missing_ok=True)


@pytest.mark.fleet
def test_nvidia_check_inside_a_fleet_node(fleet_node):
    (fleet_node.state_dir / "nvml.json").write_text(json.dumps(h100()))
    rc, res = node_check(fleet_node, "--vendor nvidia --expected-gpus 8 --category gpu")
    assert rc == 0 and {r["status"] for r in res.values()} == {"ok"}, res
    (fleet_node.state_dir / "nvml.json").write_text(json.dumps(h100(**{"3": {"lost": True}})))
    rc, res = node_check(fleet_node, "--vendor nvidia --expected-gpus 8 --category gpu")
    assert rc == 1 and res["nvidia.driver"]["status"] == "problem"
    (fleet_node.state_dir / "nvml.json").write_text(
        json.dumps({**h100(), "hang": "nvmlDeviceGetCount_v2"})
    )
    start = time.monotonic()
    rc, res = node_check(fleet_node, "--vendor nvidia --category gpu --timeout 2")
    assert rc == 2 and res["nvidia.driver"]["status"] == "unknown" and time.monotonic() - start < 15


@pytest.mark.fleet
def test_amd_check_inside_a_fleet_node(fleet_node):
    (fleet_node.state_dir / "amd.json").write_text(json.dumps(mi300x(8)))
    rc, res = node_check(fleet_node, "--vendor amd --expected-gpus 8 --category gpu")
    assert rc == 0, res
    (fleet_node.state_dir / "amd.json").write_text(json.dumps(mi300x(8, **{"6": {"agent": False}})))
    rc, res = node_check(fleet_node, "--vendor amd --expected-gpus 8 --category gpu")
    assert rc == 1 and res["amd.agents"]["status"] == "problem"


@pytest.mark.fleet
def test_throughput_probe_from_a_fleet_node_sees_throttling(fleet, fleet_node):
    need_iperf3()
    port = free_port()
    server = subprocess.Popen(
        ["iperf3", "-s", "-B", fleet.host_address, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port)
        args = (
            f"--category network --peer {fleet.host_address}:{port} --min-mbps 50 "
            "--network-duration 1"
        )
        rc, res = node_check(fleet_node, args)
        assert rc == 0 and res["network.throughput"]["evidence"]["mbps"] > 50, res
        fleet_node.throttle("10mbit")
        try:
            rc, res = node_check(fleet_node, args)
            assert rc == 1 and res["network.throughput"]["status"] == "problem", res
            assert res["network.throughput"]["evidence"]["mbps"] < 20
        finally:
            fleet_node.throttle(None)
        rc, res = node_check(fleet_node, args)
        assert rc == 0, res
    finally:
        server.kill()
        server.wait()
