"""Diagnostics by level, AMD side: the ROCm Validation Suite's ``rvs -r N`` (issue 20 part 3).

RVS prints no one machine format across its modules, so :func:`parse_rvs` reads the
verdicts its text output has carried for years, one :class:`~fleetmedic.checks.diag.TestResult`
per action (test ``name``, module as ``category``), with the GPUs that failed it:

- per-GPU verdict lines ``[RESULT] [ts] [action] ... pass: TRUE|FALSE`` (iet, smqt, pulse)
  and ``... met: TRUE|FALSE`` (gst), ``mem Test N : PASS|FAIL``, ``peqt true|false``;
  the GPU as ``[GPU:: 42583]``, ``[GPU:: 2 - 42583 - 0000:05:00.0]`` or ``smqt 42583``
  (RVS's GPU id, not an index);
- the summary table RVS 1.6+ prints at the end (``| action | MODULE | PASS/FAIL |``, the
  verdict coloured with ANSI escapes), which decides an action when present, and its
  system overview, which maps GPU ids to index, PCI address and model for the evidence.

:func:`run_rvs` runs the tool with a timeout per level and judges it as
:func:`~fleetmedic.checks.diag.run_dcgm` does; a failed module maps to a rung through the
``rvs`` section of ``data/diag_catalog.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks.base import CheckResult, ok, problem, unknown
from fleetmedic.checks.diag import DiagParseError, TestResult, load_catalog, run_tool, rung_for

NAME = "diag.rvs"
# seconds per level: RVS's documented lengths (1-2 seconds, 3 minutes, 4 tens of
# minutes, 5 hours) with room
DEFAULT_TIMEOUTS: Mapping[int, float] = {1: 120.0, 2: 600.0, 3: 1800.0, 4: 5400.0, 5: 21600.0}
# where the rocm-validation-suite package installs rvs when it is not on PATH
ROCM_BIN = "/opt/rocm/bin"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RESULT = re.compile(r"^\s*\[RESULT\s*\]\s*\[\s*[\d.]+\s*\]\s*(?P<rest>.*)$")
_ACTION = re.compile(r"^\[(?P<action>[^\]]+)\]\s*(?P<rest>.*)$")
_HEADER = re.compile(r"^(?P<key>Action|Module) name\s*:\s*(?P<value>\S+)")
_VERDICT = re.compile(
    r"\b(?:pass|met)\s*:\s*(?P<v>true|false)\b"
    r"|\bTest\s+\d+\s*:\s*(?P<mem>pass|fail)\b"
    r"|^peqt\s+(?P<peqt>true|false)\s*$",
    re.IGNORECASE,
)
_GPU = re.compile(
    r"\[GPU::\s*(?:\d+\s*-\s*)?(?P<id>\d+)\s*(?:-[^\]]*)?\]|^[a-z]+\s+(?P<bare>\d+)\s"
)
_ROW = re.compile(
    r"^\|\s*(?P<action>[^|]*?)\s*\|\s*(?P<module>[A-Za-z0-9_]+)\s*\|\s*(?P<v>PASS|FAIL)"
)
_VERSION = re.compile(r"^\|\s*RVS version\s*\|\s*(?P<v>[^|]*?)\s*\|")
_CELL_NAME = re.compile(r"^(?P<model>.+?)\s+-\s+(?P<id>\d+)$")
_CELL_PLACE = re.compile(r"^(?P<index>\d+)\s+-\s+\d+\s+-\s+(?P<bdf>[0-9a-fA-F:.]+)$")


class _Action:
    def __init__(self, name: str) -> None:
        self.name, self.module = name, ""
        self.passed: set[int | None] = set()
        self.failed: set[int | None] = set()
        self.summary: str | None = None  # "pass" | "fail" from the summary table

    def result(self) -> TestResult | None:
        status = self.summary or ("fail" if self.failed else "pass" if self.passed else None)
        if status is None:
            return None  # an action that printed no verdict (gpup, gm) and no summary row
        gpus = self.failed if status == "fail" else self.passed
        ids = tuple(sorted(g for g in gpus if g is not None))
        return TestResult(category=self.module.lower(), name=self.name, gpus=ids, status=status)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_rvs(text: str) -> tuple[str, list[TestResult], dict[int, dict[str, Any]]]:
    """(version, one result per action, GPU id -> {index, bdf, model}); raises
    DiagParseError when ``text`` holds no verdict."""
    actions: dict[str, _Action] = {}
    version, current = "", None
    gpus: dict[int, dict[str, Any]] = {}
    names: list[tuple[str, int]] = []
    in_summary = False
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).replace("\r", "")
        if m := _RESULT.match(line):
            rest = m["rest"]
            if h := _HEADER.match(rest):
                if h["key"] == "Action":
                    current = actions.setdefault(h["value"], _Action(h["value"]))
                elif current is not None:
                    current.module = h["value"]
                continue
            if not (a := _ACTION.match(rest)):
                continue
            act = actions.setdefault(a["action"], _Action(a["action"]))
            v = _VERDICT.search(a["rest"].strip())
            if v is None:
                continue
            word = (v["v"] or v["mem"] or v["peqt"]).lower()
            g = _GPU.search(a["rest"].strip())
            gpu = int(g["id"] or g["bare"]) if g else None
            (act.passed if word in ("true", "pass") else act.failed).add(gpu)
            continue
        if m := _VERSION.match(line):
            version = m["v"]
        elif line.lstrip().startswith("| Action Name"):
            in_summary = True
        elif in_summary and (r := _ROW.match(line.strip())):
            act = actions.setdefault(r["action"], _Action(r["action"]))
            act.module = act.module or r["module"].lower()
            act.summary = r["v"].lower()
        elif line.lstrip().startswith("|") and not in_summary:
            # the system overview: a row of "model - id" cells, then their "index - node - bdf"
            cells = _cells(line)
            named = [(n["model"], int(n["id"])) for c in cells if (n := _CELL_NAME.match(c))]
            placed = [p for c in cells if (p := _CELL_PLACE.match(c))]
            if named and len(named) == len(cells):
                names = named
            elif placed and len(placed) == len(names):
                for (model, gid), p in zip(names, placed, strict=True):
                    gpus[gid] = {"index": int(p["index"]), "bdf": p["bdf"], "model": model}
                names = []
    results = [t for a in actions.values() if (t := a.result()) is not None]
    if not results:
        raise DiagParseError("no RVS verdict in the output")
    return version, results, gpus


def evaluate(level: int, text: str, catalog: Mapping[str, str] | None = None) -> CheckResult:
    try:
        version, results, gpus = parse_rvs(text)
    except DiagParseError as exc:
        return unknown(NAME, str(exc), level=level)
    failed = [r for r in results if r.status == "fail"]
    evidence: dict[str, Any] = {
        "level": level,
        "version": version,
        "tests": [r.to_dict() for r in results],
        "gpus": {str(k): v for k, v in sorted(gpus.items())},
    }
    if not failed:
        return ok(NAME, f"rvs -r {level}: {len(results)} actions, none failed", **evidence)

    def where(r: TestResult) -> str:
        named = [gpus[g]["bdf"] if g in gpus else str(g) for g in r.gpus]
        return f"{r.name} ({r.category}" + (f", GPU {','.join(named)})" if named else ")")

    # the catalog maps modules: an action's name is the operator's own
    catalog = catalog if catalog is not None else load_catalog("rvs")
    action = rung_for(failed, catalog, key=lambda t: t.category)
    evidence["failed"] = [r.to_dict() for r in failed]
    summary = f"rvs -r {level} failed: {'; '.join(sorted(map(where, failed)))}"
    return problem(NAME, summary, action=action, **evidence)


def run_rvs(level: int, timeout: float | None = None, rvs: str = "rvs") -> CheckResult:
    """Run ``rvs -r LEVEL`` (the platform's level config) within the level's timeout."""
    if level not in DEFAULT_TIMEOUTS:
        raise ValueError(f"level must be 1-5, got {level}")
    limit = timeout if timeout is not None else DEFAULT_TIMEOUTS[level]
    argv = [rvs, "-r", str(level)]
    return run_tool(NAME, argv, level, limit, lambda out: evaluate(level, out), search=ROCM_BIN)
