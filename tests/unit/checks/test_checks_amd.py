"""AMD parsers and rules on the tools' real output shapes (no processes run here)."""

import json

import pytest

from fleetmedic.checks import amd
from fleetmedic.checks import amd_parse as parse
from fleetmedic.checks.config import AmdConfig, CheckConfig
from fleetmedic.checks.proc import Completed

TOOLS = {
    "amd-smi": "/usr/bin/amd-smi",
    "rocm-smi": "/usr/bin/rocm-smi",
    "rocminfo": "/usr/bin/rocminfo",
}


def metric_entry(
    i, *, unc=0, deferred=0, width=16, speed=32, xgmi="AMDSMI_XGMI_STATUS_NO_ERRORS", blocks=None
):
    return {
        "gpu": i,
        "pcie": {
            "width": width,
            "speed": {"value": speed, "unit": "GT/s"},
            "bandwidth": "N/A",
            "replay_count": 0,
            "l0_to_recovery_count": 0,
        },
        "ecc": {
            "total_correctable_count": 3,
            "total_uncorrectable_count": unc,
            "total_deferred_count": deferred,
            "cache_correctable_count": 0,
            "cache_uncorrectable_count": 0,
        },
        "ecc_blocks": blocks
        or {
            "UMC": {"correctable_count": 3, "uncorrectable_count": unc, "deferred_count": 0},
            "GFX": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0},
        },
        "xgmi_err": xgmi,
    }


def static_entry(i, max_width=16, max_speed=32):
    return {
        "gpu": i,
        "bus": {
            "bdf": f"0000:{5 + 16 * i:02x}:00.0",
            "max_pcie_width": max_width,
            "max_pcie_speed": {"value": max_speed, "unit": "GT/s"},
            "pcie_interface_version": "Gen 5",
            "slot_type": "OAM",
        },
    }


def pages(n, status):
    if not n:
        return "No bad pages found."
    e = [
        {"page_address": 0x7E0001000 + k * 4096, "page_size": 4096, "status": status}
        for k in range(n)
    ]
    return e[0] if n == 1 else e


ROCMINFO_GPU = """\
*******                  
Agent {n}                  
*******                  
  Name:                    gfx942                             
  Uuid:                    GPU-5c2e9a3d11ff000{n}               
  Marketing Name:          AMD Instinct MI300X                
  Vendor Name:             AMD                                
  Feature:                 KERNEL_DISPATCH                    
  Node:                    {n}                                  
  Device Type:             GPU                                
  ISA Info:                
    ISA 1                    
      Name:                    amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-
"""
ROCMINFO_HEAD = """\
ROCk module version 6.12.12 is loaded
=====================    
HSA System Attributes    
=====================    
Runtime Version:         1.15
Machine Model:           LARGE                              

==========               
HSA Agents               
==========               
*******                  
Agent 1                  
*******                  
  Name:                    AMD EPYC 9654 96-Core Processor    
  Marketing Name:          AMD EPYC 9654 96-Core Processor    
  Vendor Name:             CPU                                
  Device Type:             CPU                                
  Cache Info:              
    L1:                      32768(0x8000) KB                   
"""


def rocminfo_text(gpus):
    return (
        ROCMINFO_HEAD
        + "".join(ROCMINFO_GPU.format(n=k + 2) for k in range(gpus))
        + "*** Done ***\n"
    )


def done(stdout, rc=0, **kw):
    return Completed(("tool",), rc, stdout, "", 0.3, **kw)


def runs_for(n=2, legacy=False, metric=None, static=None, bad=None, rocminfo=None):
    wrap = (lambda x: x) if legacy else (lambda x: {"gpu_data": x})
    return {
        "list": done(
            json.dumps(
                [
                    {
                        "gpu": i,
                        "bdf": f"0000:{5 + 16 * i:02x}:00.0",
                        "uuid": "u",
                        "kfd_id": 1,
                        "node_id": i + 1,
                        "partition_id": 0,
                    }
                    for i in range(n)
                ]
            )
        ),
        "metric": done(json.dumps(wrap(metric or [metric_entry(i) for i in range(n)]), indent=4)),
        "static": done(json.dumps(wrap(static or [static_entry(i) for i in range(n)]), indent=4)),
        "bad_pages": done(
            json.dumps(
                wrap(
                    bad
                    or [
                        {
                            "gpu": i,
                            "retired": pages(0, "RESERVED"),
                            "pending": pages(0, "PENDING"),
                            "un_res": pages(0, "UNRESERVABLE"),
                        }
                        for i in range(n)
                    ]
                ),
                indent=4,
            )
        ),
        "rocminfo": done(rocminfo if rocminfo is not None else rocminfo_text(n)),
    }


def evaluate(runs, tools=TOOLS, cfg=None):
    return {r.name: r for r in amd.evaluate(runs, tools, cfg or CheckConfig(vendor="amd"))}


# ---------------------------------------------------------------- parsers
def test_gpu_entries_accepts_both_amd_smi_shapes():
    entries = [{"gpu": 0, "x": 1}, {"gpu": 1, "x": 2}]
    assert parse.gpu_entries(json.dumps(entries)) == parse.gpu_entries(
        json.dumps({"gpu_data": entries})
    )
    with pytest.raises(parse.ParseError):
        parse.gpu_entries("ERROR: amdgpu not loaded")
    with pytest.raises(parse.ParseError):
        parse.gpu_entries('{"nope": 1}')


@pytest.mark.parametrize(
    "value,want",
    [
        (3, 3),
        ({"value": 32, "unit": "GT/s"}, 32),
        ("16 GT/s", 16),
        ("2.5 GT/s", 2.5),
        ("N/A", None),
        (None, None),
    ],
)
def test_num(value, want):
    assert parse.num(value) == want


@pytest.mark.parametrize(
    "value,want",
    [
        ("No bad pages found.", 0),
        ({"page_address": 1}, 1),
        ([{}, {}, {}], 3),
        ("N/A", None),
    ],
)
def test_page_count(value, want):
    assert parse.page_count(value) == want


@pytest.mark.parametrize(
    "value,want",
    [
        ("AMDSMI_XGMI_STATUS_NO_ERRORS", 0),
        ("AMDSMI_XGMI_STATUS_ERROR", 1),
        ("AMDSMI_XGMI_STATUS_MULTIPLE_ERRORS", 2),
        (0, 0),
        (2, 2),
        ("N/A", None),
        ("1", 1),
    ],
)
def test_xgmi_errors(value, want):
    assert parse.xgmi_errors(value) == want


RAS_TABLE = """\
=================================== RAS Info ===================================

GPU[0]: \tRAS INFO
         Block       Status    {a}  {b}  
           UMC        ENABLED                  {u}                7  
           GFX        ENABLED                  0                0  
________________________________________________________________________________
"""


@pytest.mark.parametrize(
    "first,second,want_unc",
    [
        ("uncorrectable err", "correctable err", 4),
        ("correctable err", "uncorrectable err", 7),
    ],
)
def test_rocm_smi_ras_table_reads_columns_by_header(first, second, want_unc):
    ras = parse.rocm_smi_ras(RAS_TABLE.format(a=first, b=second, u=4))
    assert ras[0]["UMC"]["uncorrectable"] == want_unc
    assert ras[0]["GFX"] == {"status": "ENABLED", "uncorrectable": 0, "correctable": 0}


def test_rocminfo_agents():
    agents = parse.rocminfo_agents(rocminfo_text(3))
    assert [a["Device Type"] for a in agents] == ["CPU", "GPU", "GPU", "GPU"]
    assert agents[1]["Marketing Name"] == "AMD Instinct MI300X" and agents[1]["Name"] == "gfx942"
    assert parse.rocm_not_loaded("ROCk module is NOT loaded, possibly no GPU devices\n")


# ------------------------------------------------------------------ rules
@pytest.mark.parametrize("legacy", [False, True])
def test_healthy(legacy):
    res = evaluate(runs_for(2, legacy=legacy), cfg=CheckConfig(vendor="amd", expected_gpus=2))
    assert {n: r.status for n, r in res.items()} == {n: "ok" for n in amd.CHECK_NAMES}
    assert res["amd.agents"].evidence["models"] == ["AMD Instinct MI300X"]


@pytest.mark.parametrize(
    "kwargs,check,fragment,action",
    [
        (
            {"metric": [metric_entry(0), metric_entry(1, unc=5)]},
            "amd.ecc",
            "5 uncorrectable ECC error(s) (blocks UMC)",
            None,
        ),
        ({"metric": [metric_entry(0), metric_entry(1, deferred=2)]}, "amd.ecc", "2 deferred", None),
        (
            {"metric": [metric_entry(0), metric_entry(1, width=8)]},
            "amd.pcie",
            "link width x8 of x16",
            None,
        ),
        (
            {"metric": [metric_entry(0), metric_entry(1, speed=16)]},
            "amd.pcie",
            "link speed 16 of 32 GT/s",
            None,
        ),
        (
            {
                "metric": [
                    metric_entry(0),
                    metric_entry(1, xgmi="AMDSMI_XGMI_STATUS_MULTIPLE_ERRORS"),
                ]
            },
            "amd.xgmi",
            "XGMI link errors (multiple)",
            None,
        ),
        (
            {
                "bad": [
                    {
                        "gpu": 0,
                        "retired": pages(0, "R"),
                        "pending": pages(0, "P"),
                        "un_res": pages(0, "U"),
                    },
                    {
                        "gpu": 1,
                        "retired": pages(1, "RESERVED"),
                        "pending": pages(2, "PENDING"),
                        "un_res": pages(0, "U"),
                    },
                ]
            },
            "amd.bad_pages",
            "2 bad page(s) pending",
            None,
        ),
        (
            {
                "bad": [
                    {
                        "gpu": 0,
                        "retired": pages(0, "R"),
                        "pending": pages(0, "P"),
                        "un_res": pages(0, "U"),
                    },
                    {
                        "gpu": 1,
                        "retired": pages(3, "RESERVED"),
                        "pending": pages(0, "P"),
                        "un_res": pages(1, "UNRES"),
                    },
                ]
            },
            "amd.bad_pages",
            "1 unreservable bad page(s)",
            "manual",
        ),
    ],
)
def test_faults(kwargs, check, fragment, action):
    res = evaluate(runs_for(2, **kwargs))
    r = res[check]
    assert (
        r.status == "problem"
        and fragment in r.summary
        and r.summary.startswith("GPU 1 (0000:15:00.0)")
    )
    assert r.action == action
    assert all(x.status == "ok" for n, x in res.items() if n != check)


def test_retired_pages_limit():
    bad = [
        {
            "gpu": 0,
            "retired": pages(12, "RESERVED"),
            "pending": pages(0, "P"),
            "un_res": pages(0, "U"),
        }
    ]
    assert evaluate(runs_for(1, bad=bad))["amd.bad_pages"].status == "ok"
    cfg = CheckConfig(amd=AmdConfig(bad_pages_limit=10))
    assert evaluate(runs_for(1, bad=bad), cfg=cfg)["amd.bad_pages"].status == "problem"


def test_missing_gpu_agent():
    res = evaluate(runs_for(4, rocminfo=rocminfo_text(3)))
    assert res["amd.agents"].status == "problem"
    assert res["amd.agents"].summary == "3 of 4 expected GPU agents visible"


def test_partitioned_gpus_show_more_agents_than_gpus():
    assert evaluate(runs_for(2, rocminfo=rocminfo_text(16)))["amd.agents"].status == "ok"


def test_rocminfo_without_driver_is_a_problem():
    runs = runs_for(2)
    runs["rocminfo"] = done("ROCk module is NOT loaded, possibly no GPU devices\n", rc=1)
    r = evaluate(runs)["amd.agents"]
    assert r.status == "problem" and "ROCk module is NOT loaded" in r.summary


def test_na_values_are_not_applicable():
    metric = [
        {
            "gpu": 0,
            "ecc": {
                k: "N/A"
                for k in (
                    "total_correctable_count",
                    "total_uncorrectable_count",
                    "total_deferred_count",
                    "cache_correctable_count",
                    "cache_uncorrectable_count",
                )
            },
            "ecc_blocks": "N/A",
            "pcie": metric_entry(0)["pcie"],
            "xgmi_err": "N/A",
        }
    ]
    bad = [{"gpu": 0, "retired": "N/A", "pending": "N/A", "un_res": "N/A"}]
    res = evaluate(runs_for(1, metric=metric, bad=bad))
    for name in ("amd.ecc", "amd.xgmi", "amd.bad_pages"):
        assert res[name].status == "ok" and not res[name].applicable, res[name]


def test_hung_or_broken_amd_smi_is_unknown():
    runs = runs_for(2)
    runs["metric"] = done("", rc=None, timed_out=True)
    runs["bad_pages"] = done("Traceback (most recent call last):\nKeyError: 'libamd_smi.so'", rc=1)
    res = evaluate(runs)
    assert res["amd.ecc"].status == res["amd.pcie"].status == res["amd.xgmi"].status == "unknown"
    assert "no answer within" in res["amd.ecc"].summary
    assert res["amd.bad_pages"].status == "unknown" and "exit 1" in res["amd.bad_pages"].summary
    assert res["amd.count"].status == "ok" and res["amd.agents"].status == "ok"


def test_rocm_smi_fallback():
    ras = RAS_TABLE.format(a="uncorrectable err", b="correctable err", u=0) + RAS_TABLE.format(
        a="uncorrectable err", b="correctable err", u=6
    ).replace("GPU[0]", "GPU[1]")
    runs = {
        "rocm_ras": done(ras),
        "rocm_json": done(
            json.dumps(
                {
                    "card0": {"PCI Bus": "0000:05:00.0", "XGMI Error count": "0"},
                    "card1": {"PCI Bus": "0000:15:00.0", "XGMI Error count": "1"},
                }
            )
        ),
        "rocminfo": done(rocminfo_text(2)),
    }
    tools = {**TOOLS, "amd-smi": None}
    res = evaluate(runs, tools, CheckConfig(vendor="amd", expected_gpus=2))
    assert res["amd.count"].status == "ok" and res["amd.count"].evidence["source"] == "rocm-smi"
    assert res["amd.ecc"].status == "problem" and "UMC" in res["amd.ecc"].summary
    assert res["amd.xgmi"].status == "problem"
    assert res["amd.bad_pages"].status == "ok" and not res["amd.bad_pages"].applicable
    assert res["amd.pcie"].status == "ok" and not res["amd.pcie"].applicable
    assert res["amd.agents"].status == "ok"


def test_no_tools_at_all():
    res = evaluate({}, {t: None for t in TOOLS})
    assert (
        res["amd.agents"].status == "problem"
        and "rocminfo not installed" in res["amd.agents"].summary
    )
    assert all(res[n].status == "unknown" for n in ("amd.count", "amd.ecc", "amd.xgmi"))
