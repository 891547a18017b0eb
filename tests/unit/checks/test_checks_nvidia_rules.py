"""NVIDIA rules over synthetic NVML reader output (the worker's JSON-lines protocol)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.checks import nvidia
from fleetmedic.checks.config import CheckConfig, NvidiaConfig
from fleetmedic.checks.nvidia_rules import CHECK_NAMES, evaluate
from fleetmedic.checks.proc import Completed

HEALTHY = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-x",
    "pci_bus_id": "00000000:18:00.0",
    "ecc_volatile_uncorrected": 0,
    "retired_pages_pending": False,
    "retired_pages_sbe": 0,
    "retired_pages_dbe": 0,
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    "recovery_action": 0,
    "pcie_gen": 5,
    "pcie_max_gen": 5,
    "pcie_width": 16,
    "pcie_max_width": 16,
    "nvlink": {str(i): 1 for i in range(18)},
    "clocks_event_reasons": 1,
    "persistence_mode": 1,
}
ERR = {
    "NOT_SUPPORTED": 3,
    "GPU_IS_LOST": 15,
    "TIMEOUT": 10,
    "NO_PERMISSION": 4,
    "DRIVER_NOT_LOADED": 9,
    "LIBRARY_NOT_FOUND": 12,
    "UNKNOWN": 999,
}


def reading(op, value=None, gpu=None, error=None):
    msg = {"op": op}
    if gpu is not None:
        msg["gpu"] = gpu
    if error:
        msg.update(error=error, code=ERR.get(error, 999), message=error.replace("_", " ").title())
    else:
        msg["value"] = value
    return json.dumps(msg)


def worker_output(gpus, *, init_error=None, done=True, stop_before=None, overrides=None):
    """Lines as nvml_worker prints them; overrides: {(gpu, op): value | ("error", NAME)}."""
    overrides = overrides or {}
    out = [json.dumps({"begin": "init", "gpu": None})]
    if init_error:
        out.append(reading("init", error=init_error))
        return "\n".join([*out, json.dumps({"op": "done"})])
    out += [reading("init", True), reading("driver_version", "550.90.07"), reading("count", gpus)]
    for i in range(gpus):
        for op in ["handle", *HEALTHY]:
            if stop_before == (op, i):
                out.append(json.dumps({"begin": op, "gpu": i}))
                return "\n".join(out)
            v = overrides.get((i, op), True if op == "handle" else HEALTHY[op])
            if isinstance(v, tuple) and v[0] == "error":
                out.append(reading(op, gpu=i, error=v[1]))
                if op == "handle":
                    break
            else:
                out.append(reading(op, v, gpu=i))
    if done:
        out.append(json.dumps({"op": "done"}))
    return "\n".join(out)


def results(text, cfg=None, timed_out=False):
    run = Completed(("python",), None if timed_out else 0, text, "", 1.0, timed_out=timed_out)
    res = evaluate(nvidia.parse(text, run, timeout=5), cfg or CheckConfig(vendor="nvidia"))
    return {r.name: r for r in res}


def test_healthy_node_is_all_ok():
    res = results(worker_output(8), CheckConfig(expected_gpus=8))
    assert list(res) == list(CHECK_NAMES)
    assert {r.status for r in res.values()} == {"ok"}
    assert res["nvidia.driver"].summary == "NVML up, driver 550.90.07"
    assert res["nvidia.count"].summary == "8 of 8 expected GPUs visible"
    assert res["nvidia.ecc"].evidence["gpus"]["7"]["volatile_uncorrected"] == 0


@pytest.mark.parametrize(
    "op,value,check,fragment,action",
    [
        ("ecc_volatile_uncorrected", 2, "nvidia.ecc", "2 volatile uncorrectable ECC", None),
        ("retired_pages_pending", True, "nvidia.retired_pages", "page retirement pending", None),
        ("retired_pages_dbe", 70, "nvidia.retired_pages", "70 retired pages (limit 60)", None),
        (
            "remapped_rows",
            {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
            "nvidia.remapped_rows",
            "row remap pending",
            None,
        ),
        (
            "remapped_rows",
            {"correctable": 0, "uncorrectable": 9, "pending": False, "failure": True},
            "nvidia.remapped_rows",
            "row remapping failed",
            "manual",
        ),
        ("recovery_action", 2, "nvidia.recovery_action", "driver asks for NODE_REBOOT", None),
        ("pcie_width", 8, "nvidia.pcie", "link width x8 of x16", None),
        (
            "nvlink",
            {"0": 1, "1": 0, "2": 1, "3": 0},
            "nvidia.nvlink",
            "NVLink links 1,3 down (2/4 up)",
            None,
        ),
        ("clocks_event_reasons", 0x40, "nvidia.slowdown", "HwThermalSlowdown", None),
        ("clocks_event_reasons", 0x88, "nvidia.slowdown", "HwSlowdown, HwPowerBrakeSlowdown", None),
        ("persistence_mode", 0, "nvidia.persistence", "persistence mode is off", None),
    ],
)
def test_each_fault_is_a_problem_of_its_own_check(op, value, check, fragment, action):
    res = results(worker_output(4, overrides={(2, op): value}))
    r = res[check]
    assert r.status == "problem", r
    assert fragment in r.summary and r.summary.startswith("GPU 2 (00000000:18:00.0)")
    assert r.action == action
    others = {n: x.status for n, x in res.items() if n != check}
    assert set(others.values()) == {"ok"}, others


def test_software_throttling_is_not_a_problem():
    res = results(worker_output(1, overrides={(0, "clocks_event_reasons"): 0x4 | 0x20 | 0x1}))
    assert res["nvidia.slowdown"].status == "ok"
    assert res["nvidia.slowdown"].evidence["gpus"]["0"]["active"] == [
        "GpuIdle",
        "SwPowerCap",
        "SwThermalSlowdown",
    ]


@pytest.mark.parametrize(
    "reasons,allow,want",
    [
        (0x1, True, "ok"),  # idle GPU: gen downshift saves power
        (0x0, True, "problem"),  # busy GPU at Gen3 of Gen5: degraded link
        (0x1, False, "problem"),  # operator asked to flag any downshift
    ],
)
def test_pcie_generation_downshift_is_only_a_problem_when_busy(reasons, allow, want):
    cfg = CheckConfig(nvidia=NvidiaConfig(allow_idle_pcie_downshift=allow))
    res = results(
        worker_output(1, overrides={(0, "pcie_gen"): 3, (0, "clocks_event_reasons"): reasons}), cfg
    )
    assert res["nvidia.pcie"].status == want


def test_persistence_not_required():
    cfg = CheckConfig(nvidia=NvidiaConfig(require_persistence_mode=False))
    res = results(worker_output(1, overrides={(0, "persistence_mode"): 0}), cfg)
    assert res["nvidia.persistence"].status == "ok"


@pytest.mark.parametrize("op", [op for op in HEALTHY if op not in ("name", "uuid", "pci_bus_id")])
def test_not_supported_is_not_applicable_never_a_problem(op):
    overrides = {(i, op): ("error", "NOT_SUPPORTED") for i in range(2)}
    res = results(worker_output(2, overrides=overrides))
    assert {r.status for r in res.values()} == {"ok"}
    affected = [r for r in res.values() if not r.applicable]
    assert affected and all("not applicable" in r.summary for r in affected)


def test_not_supported_on_some_gpus_only():
    res = results(worker_output(3, overrides={(0, "nvlink"): ("error", "NOT_SUPPORTED")}))
    r = res["nvidia.nvlink"]
    assert r.status == "ok" and r.applicable and "1 GPU(s) do not support it" in r.summary


def test_gpu_lost_is_one_driver_problem_and_unreadable_elsewhere():
    res = results(
        worker_output(4, overrides={(1, "handle"): ("error", "GPU_IS_LOST")}),
        CheckConfig(expected_gpus=4),
    )
    assert res["nvidia.driver"].status == "problem"
    assert (
        "GPU 1: GPU is lost (GPU_IS_LOST from nvmlDeviceGetHandleByIndex_v2)"
        in res["nvidia.driver"].summary
    )
    assert res["nvidia.count"].status == "ok"
    for name in CHECK_NAMES[2:]:
        assert res[name].status == "unknown" and "GPU is lost" in res[name].summary


def test_gpu_lost_on_a_metric_call():
    res = results(worker_output(2, overrides={(0, "remapped_rows"): ("error", "GPU_IS_LOST")}))
    assert (
        res["nvidia.driver"].status == "problem"
        and "nvmlDeviceGetRemappedRows" in res["nvidia.driver"].summary
    )


@pytest.mark.parametrize("error", ["TIMEOUT", "NO_PERMISSION", "UNKNOWN"])
def test_other_call_errors_are_unknown(error):
    res = results(worker_output(2, overrides={(1, "ecc_volatile_uncorrected"): ("error", error)}))
    assert res["nvidia.ecc"].status == "unknown"
    assert res["nvidia.driver"].status == "ok"


@pytest.mark.parametrize(
    "error,status,fragment",
    [
        ("DRIVER_NOT_LOADED", "problem", "kernel driver not loaded"),
        ("LIBRARY_NOT_FOUND", "problem", "libnvidia-ml.so.1 not found"),
        ("GPU_IS_LOST", "problem", "NVML init failed"),
        ("NO_PERMISSION", "unknown", "NVML init failed"),
        ("TIMEOUT", "unknown", "NVML init failed"),
    ],
)
def test_init_failures(error, status, fragment):
    res = results(worker_output(0, init_error=error))
    assert res["nvidia.driver"].status == status and fragment in res["nvidia.driver"].summary
    assert all(
        res[n].status == "unknown" and "NVML not available" in res[n].summary
        for n in CHECK_NAMES[1:]
    )


def test_hung_call_is_unknown_and_named():
    text = worker_output(3, stop_before=("remapped_rows", 1))
    res = results(text, timed_out=True)
    assert res["nvidia.driver"].status == "unknown"
    assert (
        "nvmlDeviceGetRemappedRows on GPU 1 did not return within 5s"
        in res["nvidia.driver"].summary
    )
    assert (
        res["nvidia.remapped_rows"].status == "unknown"
        and "hung" in res["nvidia.remapped_rows"].summary
    )
    ecc = res["nvidia.ecc"]  # read on GPU 0 and 1 before the hang,
    assert ecc.status == "unknown"  # never on GPU 2
    assert [ecc.evidence["gpus"][g]["status"] for g in "012"] == ["ok", "ok", "unknown"]


def test_hung_init_is_unknown():
    res = results(json.dumps({"begin": "init", "gpu": None}), timed_out=True)
    assert (
        res["nvidia.driver"].status == "unknown"
        and "nvmlInitWithFlags" in res["nvidia.driver"].summary
    )


def test_worker_crash_is_unknown():
    text = worker_output(2, done=False)
    run = Completed(("python",), 1, text, "Traceback ...\nSegmentation fault", 0.5)
    res = {r.name: r for r in evaluate(nvidia.parse(text, run, 5), CheckConfig())}
    assert (
        res["nvidia.driver"].status == "unknown" and "stopped early" in res["nvidia.driver"].summary
    )


def test_count_against_expected():
    assert (
        results(worker_output(7), CheckConfig(expected_gpus=8))["nvidia.count"].status == "problem"
    )
    assert results(worker_output(0))["nvidia.count"].status == "problem"
    over = results(worker_output(8), CheckConfig(expected_gpus=4))["nvidia.count"]
    assert over.status == "ok" and "more than" in over.summary


def test_summary_lists_at_most_three_gpus():
    res = results(worker_output(6, overrides={(i, "persistence_mode"): 0 for i in range(6)}))
    assert res["nvidia.persistence"].summary.endswith("; and 3 more")


value_or_error = st.one_of(
    st.integers(-2, 100), st.booleans(), st.sampled_from([("error", e) for e in ERR])
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.integers(0, 2), st.sampled_from(sorted(HEALTHY))), value_or_error, max_size=8
    ),
    st.one_of(st.none(), st.tuples(st.sampled_from(["handle", *HEALTHY]), st.integers(0, 2))),
)
def test_rules_never_raise_and_a_hang_is_never_healthy(overrides, stop):
    fixed = {}
    for (i, op), v in overrides.items():  # keep value types plausible per reading
        if isinstance(v, tuple):
            fixed[(i, op)] = v
        elif op in ("remapped_rows", "nvlink", "name", "uuid", "pci_bus_id"):
            continue
        else:
            fixed[(i, op)] = int(v)
    text = worker_output(3, overrides=fixed, stop_before=stop, done=stop is None)
    res = results(text, timed_out=stop is not None)
    assert set(res) == set(CHECK_NAMES)
    if stop is not None:
        assert res["nvidia.driver"].status in ("unknown", "problem")
        assert any(r.status != "ok" for r in res.values())


def test_hung_count_leaves_nothing_ok():
    text = "\n".join(
        [
            reading("init", True),
            reading("driver_version", "550"),
            json.dumps({"begin": "count", "gpu": None}),
        ]
    )
    res = results(text, timed_out=True)
    assert all(r.status == "unknown" for r in res.values()), {n: r.status for n, r in res.items()}


def test_count_error_leaves_nothing_ok():
    text = "\n".join(
        [reading("init", True), reading("count", error="UNKNOWN"), json.dumps({"op": "done"})]
    )
    res = results(text)
    assert res["nvidia.driver"].status == "ok"
    assert all(r.status == "unknown" for n, r in res.items() if n != "nvidia.driver")
