"""The GPU stand-ins learn reset: the fake ``nvidia-smi`` and ``amd-smi reset`` change the
scenario files the way a real reset changes the hardware, and the real checks (pynvml on
the fake libnvidia-ml.so.1, the AMD parsers on the fake tools) see the difference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetmedic.checks import amd, nvidia
from fleetmedic.checks.config import CheckConfig

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "fakes" / "build"


@pytest.fixture(scope="module")
def fakes() -> Path:
    if not shutil.which(os.environ.get("CC", "gcc")):
        pytest.skip("no C compiler to build the fake libnvidia-ml.so.1")
    subprocess.run(["bash", str(ROOT / "scripts/setup.d/40-fakes.sh")], check=True)
    return BUILD


@pytest.fixture
def env(tmp_path, fakes) -> dict:
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(fakes / "lib"),
        "FLEETMEDIC_FAKE_NVML": str(tmp_path / "nvml.json"),
        "FLEETMEDIC_FAKE_AMD": str(tmp_path / "amd.json"),
        "PATH": f"{fakes / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def smi(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", *args], env=env, capture_output=True, text=True)


def amd_smi(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["amd-smi", *args], env=env, capture_output=True, text=True)


def nvml(env) -> dict:
    return json.loads(Path(env["FLEETMEDIC_FAKE_NVML"]).read_text())


def nv_status(env, gpus: int = 2) -> dict[str, str]:
    res = nvidia.run(CheckConfig(vendor="nvidia", expected_gpus=gpus, timeout=5), env)
    return {r.name: (r.status, r.summary) for r in res}


def test_a_reset_is_refused_while_persistence_mode_is_on(env):
    Path(env["FLEETMEDIC_FAKE_NVML"]).write_text(
        json.dumps({"gpus": [{}, {"ecc_volatile_uncorrected": 4}]})
    )
    before = Path(env["FLEETMEDIC_FAKE_NVML"]).read_text()
    p = smi(env, "--gpu-reset", "-i", "1")
    assert p.returncode == 255
    assert p.stdout.startswith("The following GPUs could not be reset:\n")
    assert "  GPU 00000000:28:00.0: In use by another client\n" in p.stdout
    assert "1 device is currently being used by one or more other processes" in p.stdout
    assert Path(env["FLEETMEDIC_FAKE_NVML"]).read_text() == before, "a refused reset changed state"
    assert nv_status(env)["nvidia.ecc"][0] == "problem"


def test_persistence_off_then_reset_cures_a_reset_class_fault(env):
    Path(env["FLEETMEDIC_FAKE_NVML"]).write_text(
        json.dumps(
            {
                "gpus": [
                    {},
                    {
                        "ecc_volatile_uncorrected": 4,
                        "retired_pages_dbe": 2,
                        "retired_pages_pending": True,
                        "recovery_action": 1,
                    },
                ]
            }
        )
    )
    status = nv_status(env)
    assert status["nvidia.ecc"][0] == "problem" and status["nvidia.recovery_action"][0] == "problem"

    p = smi(env, "-pm", "0", "-i", "1")
    assert p.returncode == 0, p.stdout
    assert p.stdout == "Disabled persistence mode for GPU 00000000:28:00.0.\nAll done.\n"
    p = smi(env, "-r", "-i", "1")
    assert (p.returncode, p.stdout) == (0, "GPU 00000000:28:00.0 was successfully reset.\n")
    assert smi(env, "-pm", "1", "-i", "1").returncode == 0

    status = nv_status(env)
    assert all(s == "ok" for s, _ in status.values()), status
    g = nvml(env)["gpus"][1]
    assert g["resets"] == 1 and g["ecc_aggregate_uncorrected"] == 4
    assert g["retired_pages_dbe"] == 2, "retired pages stay retired"
    assert "resets" not in nvml(env)["gpus"][0], "only the named GPU was reset"


def test_a_lost_gpu_stays_lost(env):
    Path(env["FLEETMEDIC_FAKE_NVML"]).write_text(
        json.dumps({"gpus": [{"persistence_mode": 0}, {"lost": True, "persistence_mode": 0}]})
    )
    p = smi(env, "--gpu-reset")
    assert p.returncode == 15
    assert "00000000:28:00.0: GPU is lost. Reboot the system to recover this GPU" in p.stdout
    assert nvml(env)["gpus"][1]["lost"] is True
    assert "resets" not in nvml(env)["gpus"][0]
    assert any(s == "problem" for s, _ in nv_status(env).values())


def test_after_reset_keeps_what_a_reset_does_not_cure(env):
    Path(env["FLEETMEDIC_FAKE_NVML"]).write_text(
        json.dumps(
            {
                "gpus": [
                    {
                        "persistence_mode": 0,
                        "ecc_volatile_uncorrected": 4,
                        "after_reset": {"ecc_volatile_uncorrected": 4},
                    }
                ]
            }
        )
    )
    assert smi(env, "-r").returncode == 0
    assert nv_status(env, gpus=1)["nvidia.ecc"][0] == "problem"


def test_a_running_fabric_manager_holds_the_gpus_of_an_nvswitch_system(env, tmp_path):
    Path(env["FLEETMEDIC_FAKE_NVML"]).write_text(
        json.dumps({"nvswitch": True, "gpus": [{"persistence_mode": 0}]})
    )
    fm = tmp_path / "nv-fabricmanager"  # a daemon by that name: comm "nv-fabricmanage"
    shutil.copy(shutil.which("sleep"), fm)
    proc = subprocess.Popen([str(fm), "60"])
    try:
        p = smi(env, "-r")
        assert p.returncode == 255 and "In use by another client" in p.stdout
    finally:
        proc.kill()
        proc.wait()
    p = smi(env, "-r")
    assert p.returncode == 0 and p.stdout.endswith("All done.\n")
    assert nvml(env)["nvswitch_resets"] == 1


# ------------------------------------------------------------------------------ AMD
def amd_doc(env) -> dict:
    return json.loads(Path(env["FLEETMEDIC_FAKE_AMD"]).read_text())


def amd_status(env, gpus: int) -> dict[str, str]:
    res = amd.run(CheckConfig(vendor="amd", expected_gpus=gpus, timeout=10), env)
    return {r.name: r.status for r in res}


def test_amd_reset_resets_the_whole_xgmi_hive(env):
    Path(env["FLEETMEDIC_FAKE_AMD"]).write_text(
        json.dumps({"gpus": [{}, {"agent": False}, {}, {"xgmi_hive": None}]})
    )
    assert "problem" in amd_status(env, 4).values()
    p = amd_smi(env, "reset", "--gpureset", "-g", "0", "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout) == [{"gpu": 0, "gpu_reset": "Successfully reset GPU"}]
    resets = [g.get("resets", 0) for g in amd_doc(env)["gpus"]]
    assert resets == [1, 1, 1, 0], "GPUs 0-2 share the hive; GPU 3 is in none"
    assert set(amd_status(env, 4).values()) == {"ok"}


def test_amd_reset_of_a_hive_with_a_lost_gpu_fails_and_changes_nothing(env):
    Path(env["FLEETMEDIC_FAKE_AMD"]).write_text(
        json.dumps({"gpus": [{"agent": False, "lost": True}, {}]})
    )
    p = amd_smi(env, "reset", "-G", "-g", "1")
    assert p.returncode == 0, "amd-smi reports a failed reset in its output, exit 0"
    assert p.stdout == "GPU: 1\n    GPU_RESET: [AMDSMI_STATUS_IO] Unable to reset GPU\n"
    assert [g.get("resets", 0) for g in amd_doc(env)["gpus"]] == [0, 0]
    assert "problem" in amd_status(env, 2).values()
