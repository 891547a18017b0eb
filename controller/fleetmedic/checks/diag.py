"""Diagnostics by level: ``dcgmi diag -r N -j`` (issue 20 part 3, NVIDIA side).

:func:`parse_dcgm` reads dcgmi's JSON (``{"DCGM GPU Diagnostic": {"test_categories":
[{"category", "tests": [{"name", "results": [{"gpu_ids", "status", "warnings"?}]}]}]}}``)
into one :class:`TestResult` per test and GPU. It tolerates what real dcgmi prints: a
warning line before the JSON, ``null`` entries between tests (DCGM 3.1), ``gpu_ids`` as a
number or as a CSV string (the deployment tests' one row for all GPUs), statuses in any
case. :func:`run_dcgm` runs the tool with a timeout per level and returns one
``diag.dcgm`` result: ``ok`` when all tests passed, ``problem`` with the failed tests as
evidence and the catalog's rung as ``action`` (``data/diag_catalog.yaml``), ``unknown``
for a missing tool, a timeout or output that is not a diagnostic.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import yaml

from fleetmedic.checks.base import CheckResult, ok, problem, unknown
from fleetmedic.checks.proc import run_bounded

NAME = "diag.dcgm"
# seconds per level: DCGM's documented run lengths (r1 seconds, r2 ~2 min, r3 ~30 min,
# r4 1-2 h) with room; the operator may pass others
DEFAULT_TIMEOUTS: Mapping[int, float] = {1: 120.0, 2: 600.0, 3: 2700.0, 4: 7200.0}
_RANK = {"manual": 3, "reimage": 2, "reboot": 1, "reset": 0}


@dataclasses.dataclass(frozen=True)
class TestResult:
    category: str
    name: str
    gpus: tuple[int, ...]  # () when the row names no GPU
    status: str  # pass | fail | warn | skip | other lower-case words dcgmi used
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "gpus": list(self.gpus),
            "warnings": list(self.warnings),
        }


class DiagParseError(ValueError):
    pass


def _gpus(value: Any) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in str(value or "").split(",") if v.strip().isdigit())


def _warnings(row: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for w in row.get("warnings") or []:
        out.append(str(w.get("warning", w)) if isinstance(w, dict) else str(w))
    return tuple(out)


def parse_dcgm(text: str) -> tuple[str, list[TestResult]]:
    """(version, results); raises DiagParseError when there is no diagnostic in ``text``."""
    start = text.find("{")
    if start < 0:
        raise DiagParseError("no JSON in dcgmi output")
    try:
        data = json.loads(text[start:])
    except ValueError as exc:
        raise DiagParseError(f"dcgmi output is not JSON: {exc}") from None
    root = data.get("DCGM GPU Diagnostic") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise DiagParseError("no 'DCGM GPU Diagnostic' object in dcgmi output")
    results: list[TestResult] = []
    for cat in root.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue  # dcgmi 3.1 prints null between tests
            for row in test.get("results") or []:
                if not isinstance(row, dict):
                    continue
                results.append(
                    TestResult(
                        category=str(cat.get("category", "")),
                        name=str(test.get("name", "")),
                        gpus=_gpus(row.get("gpu_ids")),
                        status=str(row.get("status", "")).strip().lower(),
                        warnings=_warnings(row),
                    )
                )
    if not results:
        raise DiagParseError("dcgmi output has no test results")
    return str(root.get("version", "")), results


def load_catalog(tool: str = "dcgm") -> dict[str, str]:
    """test name (lower case) -> rung, from data/diag_catalog.yaml's ``tool`` section."""
    text = resources.files("fleetmedic.data").joinpath("diag_catalog.yaml").read_text()
    data = yaml.safe_load(text) or {}
    return {str(k).lower(): str(v) for k, v in (data.get(tool) or {}).items()}


def rung_for(
    failed: list[TestResult],
    catalog: Mapping[str, str],
    key: Callable[[TestResult], str] = lambda t: t.name,
) -> str | None:
    """The most severe rung the failed tests map to (by ``key``: the test's name unless
    said otherwise); None (strikes) for unmapped ones."""
    rungs = [catalog[key(t).lower()] for t in failed if key(t).lower() in catalog]
    return max(rungs, key=lambda r: _RANK.get(r, 0)) if rungs else None


def evaluate(level: int, text: str, catalog: Mapping[str, str] | None = None) -> CheckResult:
    try:
        version, results = parse_dcgm(text)
    except DiagParseError as exc:
        return unknown(NAME, str(exc), level=level)
    failed = [r for r in results if r.status == "fail"]
    evidence: dict[str, Any] = {
        "level": level,
        "version": version,
        "tests": [r.to_dict() for r in results],
    }
    if not failed:
        return ok(NAME, f"dcgmi diag -r {level}: {len(results)} results, none failed", **evidence)
    what = sorted({f"{r.name} (GPU {','.join(map(str, r.gpus)) or '?'})" for r in failed})
    action = rung_for(failed, catalog if catalog is not None else load_catalog())
    evidence["failed"] = [r.to_dict() for r in failed]
    return problem(
        NAME, f"dcgmi diag -r {level} failed: {'; '.join(what)}", action=action, **evidence
    )


def run_dcgm(level: int, timeout: float | None = None, dcgmi: str = "dcgmi") -> CheckResult:
    """Run ``dcgmi diag -r LEVEL -j`` within the level's timeout."""
    if level not in DEFAULT_TIMEOUTS:
        raise ValueError(f"level must be 1-4, got {level}")
    limit = timeout if timeout is not None else DEFAULT_TIMEOUTS[level]
    argv = [dcgmi, "diag", "-r", str(level), "-j"]
    return run_tool(NAME, argv, level, limit, lambda out: evaluate(level, out))


def run_tool(
    name: str,
    argv: list[str],
    level: int,
    limit: float,
    judge: Callable[[str], CheckResult],
    search: str | None = None,
) -> CheckResult:
    """Run a diagnostics tool (``argv``, its program looked up on PATH, then in ``search``)
    within ``limit`` seconds and ``judge`` its output; a missing tool, a timeout, or an
    exit without a diagnostic is ``unknown`` (never healthy)."""
    tool, *args = argv
    exe = shutil.which(tool) or (shutil.which(tool, path=search) if search else None)
    if exe is None:
        return unknown(name, f"{tool} not found (not installed)", level=level)
    what = " ".join(a for a in argv if a != "-j")
    done = run_bounded([exe, *args], limit, key=f"{name}-{level}")
    if done.timed_out:
        return unknown(name, f"{what} timed out after {limit:g} s", level=level)
    if done.error:
        return unknown(name, f"{what}: {done.error}", level=level)
    result = judge(done.stdout)
    if result.status == "unknown" and done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return unknown(name, f"{what} exited {done.returncode}: {tail[0]}", level=level)
    return dataclasses.replace(result, duration=done.elapsed)
