#!/usr/bin/env python3
"""What an RMA candidate's case costs: ``playbooks/rma_case.yml`` (the evidence bundle with
the bug report on and DCGM diagnostics at level 3, the GPUs' identities and RMA facts)
against a plain diagnose phase (``playbooks/diagnose.yml``) on the same node, in the same
run, alternating.

Usage::

    .venv/bin/python bench/rma_case_cost.py              # 7 trials of each
    .venv/bin/python bench/rma_case_cost.py --trials 3
    .venv/bin/python bench/rma_case_cost.py --smoke      # 1 of each, target not enforced

One nspawn node of the test fleet (real sshd, real Ansible) with the fake GPU tools: the
fake libnvidia-ml (whose GPUs have serials), the fake nvidia-smi and the fake dcgmi
replaying a published level-3 pass. Target: the case's playbook <= 1.2x the plain
diagnose phase (medians). Said plainly: on the fakes ``dcgmi diag -r 3`` answers at once
(on an 8-GPU H100 it takes about 30 minutes) and ``nvidia-bug-report.sh`` is not
installed (recorded as missing in the bundle; on a real node up to 10 minutes), so this
measures what the case adds in fleetmedic's own work (its tasks, the GPU report, the
published facts), not the vendor tools' run time, which the node spends anyway for the
vendor.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import _one_node as one_node  # noqa: E402

from tests.harness import ctlenv  # noqa: E402

DCGM_PASS = ROOT / "tests" / "unit" / "checks" / "data" / "dcgm" / "pass-3.1.0.txt"


def run(fleet, playbook: Path, args: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    p = subprocess.run(
        [
            str(ctlenv.VENV_BIN / "ansible-playbook"),
            "-i",
            str(fleet.inventory),
            str(playbook),
            "--limit",
            fleet.node(1).name,
            "-e",
            "fleetmedic_vendor=nvidia",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"{playbook.name} failed (rc {p.returncode}):\n{p.stdout[-3000:]}")
    return time.monotonic() - t0


def main() -> int:
    args = one_node.parse_args(__doc__, "--trials", 7)
    plain: list[float] = []
    case: list[float] = []
    from tests.harness.fleet import start_fleet

    with one_node.scratch_dir(args.workdir) as workdir:
        fleet = start_fleet(1, prefix="bench-rma", owned=True)
        try:
            ctlenv.prepare_nodes(fleet)
            node = fleet.node(1)
            scenario = {"output": DCGM_PASS.read_text(), "exit": 0}
            (node.state_dir / "dcgmi.json").write_text(json.dumps(scenario))
            books = ctlenv.playbook_dir(workdir / "ctl")
            env = {
                **os.environ,
                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                "FLEETMEDIC_EVIDENCE_DIR": str(workdir / "evidence"),
                "PATH": f"{ctlenv.VENV_BIN}:{os.environ.get('PATH', '')}",
            }
            run(fleet, books / "diagnose.yml", [], env)  # warm: first SSH, first imports
            for i in range(1, args.trials + 1):
                rid = f"e{i}-reboot1-{int(time.time())}"
                plain.append(
                    run(fleet, books / "diagnose.yml", ["-e", f"fleetmedic_request_id={rid}"], env)
                )
                case.append(
                    run(
                        fleet,
                        books / "rma_case.yml",
                        [
                            "-e",
                            f"fleetmedic_request_id={rid}",
                            "-e",
                            "rma_case_diag_level=3",
                            "-e",
                            "rma_case_bug_report=true",
                        ],
                        env,
                    )
                )
                print(
                    f"trial {i}: diagnose {plain[-1]:.2f}s, RMA case {case[-1]:.2f}s "
                    f"(load {ctlenv.load_average()})",
                    flush=True,
                )
            bundles = sorted(p.name for p in (workdir / "evidence" / node.name).iterdir())
        finally:
            fleet.down()
    p, c = statistics.median(plain), statistics.median(case)
    ratio = c / p
    print(f"\nRMA case against a plain diagnose phase, one node, {args.trials} trial(s) each:")
    print(f"  diagnose.yml: median {p:.2f} s (min {min(plain):.2f}, max {max(plain):.2f})")
    print(f"  rma_case.yml: median {c:.2f} s (min {min(case):.2f}, max {max(case):.2f})")
    print(f"  ratio {ratio:.2f}x; load average {ctlenv.load_average()}")
    print(f"  bundles written: {len(bundles)} (the case's end in -rma.tar.gz)")
    return _common.verdict(
        [
            ("the case's bundles were written", any(b.endswith("-rma.tar.gz") for b in bundles)),
            ("RMA case <= 1.2x a plain diagnose phase (medians)", ratio <= 1.2),
        ],
        args.smoke,
    )


if __name__ == "__main__":
    sys.exit(main())
