"""AMD checks: amd-smi JSON first, rocm-smi as the fallback, rocminfo for the GPU agents.

Every tool runs as a killable child under the probe deadline, all at once (so
one hung ``amd-smi`` costs one timeout, not four). rocm-smi runs only when
amd-smi is not installed or failed. A tool that hangs, crashes or prints
nonsense makes its checks ``unknown``: a tool failure is not evidence about
the GPU. rocminfo is the exception, as in the OSSCI design: when it cannot
bring up the GPUs (``ROCk module is NOT loaded``, an HSA error) the node is
broken, so ``amd.agents`` is a problem.

Known gaps: the rocm-smi fallback covers count, ECC and XGMI only; bad pages
and PCIe need amd-smi (they are then "not applicable" with the reason).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleetmedic.checks import amd_parse as parse
from fleetmedic.checks.base import CheckResult, not_applicable, problem, unknown, with_duration
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.proc import Completed, run_bounded
from fleetmedic.checks.verdicts import Verdict, count_result, fold

TOOLS = ("amd-smi", "rocm-smi", "rocminfo")
AMD_SMI = {
    "list": ("amd-smi", "list", "--json"),
    "static": ("amd-smi", "static", "--bus", "--json"),
    "metric": ("amd-smi", "metric", "--ecc", "--ecc-blocks", "--pcie", "--xgmi-err", "--json"),
    "bad_pages": ("amd-smi", "bad-pages", "--json"),
}
ROCM_SMI = {
    "rocm_ras": ("rocm-smi", "--showrasinfo", "all"),
    "rocm_json": ("rocm-smi", "--showbus", "--showxgmierr", "--json"),
}
ROCMINFO = {"rocminfo": ("rocminfo",)}
CHECK_NAMES = ("amd.count", "amd.ecc", "amd.bad_pages", "amd.pcie", "amd.xgmi", "amd.agents")


def tools_present(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    path = (env if env is not None else os.environ).get("PATH")
    return {t: shutil.which(t, path=path) for t in TOOLS}


def _run_all(
    jobs: Mapping[str, tuple[str, ...]],
    tools: Mapping[str, str | None],
    timeout: float,
    env: Mapping[str, str] | None,
) -> dict[str, Completed]:
    if not jobs or timeout <= 0:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {
            name: pool.submit(
                run_bounded,
                (tools[argv[0]] or argv[0], *argv[1:]),
                timeout,
                env=env,
                key=f"amd:{name}",
            )
            for name, argv in jobs.items()
        }
        return {name: f.result() for name, f in futures.items()}


def collect_jobs(
    jobs: Mapping[str, tuple[str, ...]], timeout: float, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Completed], dict]:
    """Run ``jobs`` (those whose tool is installed) at once under one deadline
    (``fleetmedic gpus``'s own set: checks/identity.py)."""
    tools = tools_present(env)
    present = {name: argv for name, argv in jobs.items() if tools.get(argv[0])}
    return _run_all(present, tools, timeout, env), tools


def collect(
    timeout: float, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Completed], dict]:
    """Run the tools; returns ({job: Completed}, {tool: path or None})."""
    tools = tools_present(env)
    deadline = time.monotonic() + timeout
    jobs = dict(AMD_SMI) if tools["amd-smi"] else {}
    if tools["rocminfo"]:
        jobs.update(ROCMINFO)
    runs = _run_all(jobs, tools, timeout, env)
    metric = runs.get("metric")
    if tools["rocm-smi"] and (metric is None or (not metric.ok and not metric.timed_out)):
        runs.update(_run_all(ROCM_SMI, tools, deadline - time.monotonic(), env))
    return runs, tools


def run(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    start = time.monotonic()
    runs, tools = collect(cfg.timeout, env)
    return with_duration(evaluate(runs, tools, cfg), time.monotonic() - start)


# ------------------------------------------------------------- evaluation
def _failed(run: Completed | None) -> str | None:
    """Why a run cannot be used, or None if it can."""
    if run is None:
        return "not run"
    return None if run.ok else run.describe()


def _entries(runs: Mapping[str, Completed], job: str) -> tuple[dict[int, dict] | None, str | None]:
    why = _failed(runs.get(job))
    if why:
        return None, why
    try:
        return parse.gpu_entries(runs[job].stdout), None
    except parse.ParseError as exc:
        return None, f"{' '.join(AMD_SMI[job])}: {exc}"


def evaluate(
    runs: Mapping[str, Completed], tools: Mapping[str, str | None], cfg: CheckConfig
) -> list[CheckResult]:
    listed, list_why = _entries(runs, "list") if "list" in runs else (None, None)
    metric, metric_why = _entries(runs, "metric") if "metric" in runs else (None, None)
    labels = {
        i: f"GPU {i} ({e['bdf']})" if e.get("bdf") else f"GPU {i}"
        for i, e in (listed or {}).items()
    }
    rocm_json = _rocm_json(runs)
    return [
        _count(cfg, listed, list_why, rocm_json, tools),
        _ecc(runs, metric, metric_why, labels, tools),
        _bad_pages(runs, cfg, labels, tools),
        _pcie(runs, metric, metric_why, labels, tools),
        _xgmi(metric, metric_why, rocm_json, labels, tools),
        _agents(runs, cfg, listed, tools),
    ]


def _rocm_json(runs: Mapping[str, Completed]) -> dict[int, dict[str, str]] | None:
    run = runs.get("rocm_json")
    if run is None or not run.ok:
        return None
    try:
        return parse.rocm_smi_json(run.stdout)
    except parse.ParseError:
        return None


def _no_source(
    name: str, tools: Mapping[str, str | None], why: str | None, fallback: str = ""
) -> CheckResult:
    if why:
        return unknown(name, why)
    if not tools.get("amd-smi") and not tools.get("rocm-smi"):
        return unknown(name, "neither amd-smi nor rocm-smi is installed")
    return not_applicable(name, f"needs amd-smi{fallback}; not installed", reason="amd-smi missing")


def _count(cfg, listed, why, rocm_json, tools) -> CheckResult:
    if listed is not None:
        return count_result("amd.count", len(listed), cfg.expected_gpus, source="amd-smi list")
    if rocm_json is not None:
        return count_result("amd.count", len(rocm_json), cfg.expected_gpus, source="rocm-smi")
    return _no_source("amd.count", tools, why)


def _per_gpu(
    name: str,
    entries: Mapping[int, dict],
    judge: Callable[[dict], Verdict],
    labels,
    ok_text: str,
    **extra: Any,
) -> CheckResult:
    return fold(name, {i: judge(e) for i, e in sorted(entries.items())}, labels, ok_text, **extra)


def _ecc_verdict(e: dict) -> Verdict:
    ecc = e.get("ecc")
    if not isinstance(ecc, dict):
        return Verdict("n/a", "ECC not reported")
    totals = {
        k: parse.num(ecc.get(k))
        for k in (
            "total_uncorrectable_count",
            "total_deferred_count",
            "cache_uncorrectable_count",
            "total_correctable_count",
        )
    }
    blocks = e.get("ecc_blocks")
    if not isinstance(blocks, dict):
        blocks = {}
    bad_blocks = {
        b: parse.num(v.get("uncorrectable_count"))
        for b, v in blocks.items()
        if isinstance(v, dict) and (parse.num(v.get("uncorrectable_count")) or 0) > 0
    }
    ev = {
        "uncorrectable": totals["total_uncorrectable_count"],
        "deferred": totals["total_deferred_count"],
        "cache_uncorrectable": totals["cache_uncorrectable_count"],
        "correctable": totals["total_correctable_count"],
        "blocks": bad_blocks,
    }
    if (
        all(totals[k] is None for k in ("total_uncorrectable_count", "total_deferred_count"))
        and not bad_blocks
    ):
        return Verdict("n/a", "ECC not supported", ev)
    bad = [
        f"{v} {label}"
        for label, v in (
            ("uncorrectable", totals["total_uncorrectable_count"]),
            ("deferred", totals["total_deferred_count"]),
            ("cache uncorrectable", totals["cache_uncorrectable_count"]),
        )
        if v
    ]
    if bad or bad_blocks:
        where = f" (blocks {', '.join(sorted(bad_blocks))})" if bad_blocks else ""
        return Verdict("problem", (", ".join(bad) or "uncorrectable") + " ECC error(s)" + where, ev)
    return Verdict("ok", "", ev)


def _ecc(runs, metric, why, labels, tools) -> CheckResult:
    if metric is not None:
        return _per_gpu(
            "amd.ecc", metric, _ecc_verdict, labels, "no uncorrectable ECC errors", source="amd-smi"
        )
    ras_run = runs.get("rocm_ras")
    if ras_run is not None and ras_run.ok:
        ras = parse.rocm_smi_ras(ras_run.stdout)

        def judge(blocks: dict) -> Verdict:
            bad = {b: v["uncorrectable"] for b, v in blocks.items() if v.get("uncorrectable")}
            if not any("uncorrectable" in v for v in blocks.values()):
                return Verdict("n/a", "RAS not enabled")
            return (
                Verdict(
                    "problem",
                    f"uncorrectable ECC errors in {', '.join(sorted(bad))}",
                    {"blocks": bad},
                )
                if bad
                else Verdict("ok", "", {"blocks": {}})
            )

        return _per_gpu(
            "amd.ecc", ras, judge, labels, "no uncorrectable ECC errors", source="rocm-smi"
        )
    return _no_source("amd.ecc", tools, why or (_failed(ras_run) if ras_run else None))


def _bad_pages(runs, cfg: CheckConfig, labels, tools) -> CheckResult:
    if "bad_pages" not in runs:
        return _no_source("amd.bad_pages", tools, None)
    entries, why = _entries(runs, "bad_pages")
    if entries is None:
        return unknown("amd.bad_pages", why or "no output")
    limit = cfg.amd.bad_pages_limit

    def judge(e: dict) -> Verdict:
        counts = {k: parse.page_count(e.get(k)) for k in ("retired", "pending", "un_res")}
        if all(v is None for v in counts.values()):
            return Verdict("n/a", "bad pages not reported")
        if counts["un_res"]:
            return Verdict(
                "problem",
                f"{counts['un_res']} unreservable bad page(s) (needs hands)",
                counts,
                "manual",
            )
        if counts["pending"]:
            return Verdict(
                "problem",
                f"{counts['pending']} bad page(s) pending retirement (reset/reboot)",
                counts,
            )
        if limit and (counts["retired"] or 0) >= limit:
            return Verdict("problem", f"{counts['retired']} retired pages (limit {limit})", counts)
        return Verdict("ok", "", counts)

    return _per_gpu("amd.bad_pages", entries, judge, labels, "no pending or unreservable bad pages")


def _pcie(runs, metric, why, labels, tools) -> CheckResult:
    if metric is None:
        return _no_source("amd.pcie", tools, why)
    static, static_why = _entries(runs, "static")
    if static is None:
        return unknown("amd.pcie", static_why or "no amd-smi static output")

    def judge(i: int, e: dict) -> Verdict:
        pcie, bus = e.get("pcie"), (static.get(i) or {}).get("bus")
        if not isinstance(pcie, dict) or not isinstance(bus, dict):
            return Verdict("n/a", "PCIe link not reported")
        ev: dict[str, Any] = {
            "width": parse.num(pcie.get("width")),
            "max_width": parse.num(bus.get("max_pcie_width")),
            "speed": parse.num(pcie.get("speed")),
            "max_speed": parse.num(bus.get("max_pcie_speed")),
            "replay_count": parse.num(pcie.get("replay_count")),
        }
        if None in (ev["width"], ev["max_width"]):
            return Verdict("n/a", "PCIe link width not reported", ev)
        bad = []
        if ev["width"] < ev["max_width"]:
            bad.append(f"link width x{ev['width']} of x{ev['max_width']}")
        if None not in (ev["speed"], ev["max_speed"]) and ev["speed"] < ev["max_speed"]:
            bad.append(f"link speed {ev['speed']} of {ev['max_speed']} GT/s")
        return Verdict("problem", "PCIe " + ", ".join(bad), ev) if bad else Verdict("ok", "", ev)

    verdicts = {i: judge(i, e) for i, e in sorted(metric.items())}
    return fold("amd.pcie", verdicts, labels, "PCIe links at full width and speed")


def _xgmi(metric, why, rocm_json, labels, tools) -> CheckResult:
    def verdict(n: int | None) -> Verdict:
        if n is None:
            return Verdict("n/a", "no XGMI")
        if n:
            return Verdict(
                "problem", "XGMI link errors" + (" (multiple)" if n > 1 else ""), {"xgmi_err": n}
            )
        return Verdict("ok", "", {"xgmi_err": 0})

    if metric is not None:
        return fold(
            "amd.xgmi",
            {i: verdict(parse.xgmi_errors(e.get("xgmi_err"))) for i, e in sorted(metric.items())},
            labels,
            "no XGMI errors",
            source="amd-smi",
        )
    if rocm_json is not None:
        return fold(
            "amd.xgmi",
            {
                i: verdict(parse.xgmi_errors(c.get("XGMI Error count")))
                for i, c in sorted(rocm_json.items())
            },
            labels,
            "no XGMI errors",
            source="rocm-smi",
        )
    return _no_source("amd.xgmi", tools, why)


def _agents(runs, cfg: CheckConfig, listed, tools) -> CheckResult:
    run = runs.get("rocminfo")
    if run is None:
        return problem("amd.agents", "rocminfo not installed (ROCm runtime missing)")
    if run.timed_out or run.error:
        return unknown("amd.agents", run.describe())
    if parse.rocm_not_loaded(run.stdout) or run.returncode != 0:
        last = (run.stdout.strip().splitlines() or run.stderr.strip().splitlines() or [""])[-1]
        return problem(
            "amd.agents", f"rocminfo cannot bring up the GPUs: {last[:200]}", exit=run.returncode
        )
    gpus = [a for a in parse.rocminfo_agents(run.stdout) if a.get("Device Type") == "GPU"]
    expected = (
        cfg.expected_gpus if cfg.expected_gpus is not None else (len(listed) if listed else None)
    )
    result = count_result("amd.agents", len(gpus), expected, "GPU agents", source="rocminfo")
    names = sorted({a.get("Marketing Name") or a.get("Name", "?") for a in gpus})
    return dataclasses.replace(result, evidence={**result.evidence, "models": names})
