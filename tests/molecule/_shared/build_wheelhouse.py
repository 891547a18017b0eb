#!/usr/bin/env python3
"""Build a wheelhouse of fleetmedic and its runtime dependencies for the controller and
agent roles (they install with ``pip --no-index --find-links``, as on an offline bastion).

    python3 tests/molecule/_shared/build_wheelhouse.py OUTDIR

Dependencies come through pip from its configured index (cached by pip) and are built
again only when pyproject.toml changes; the fleetmedic wheel is rebuilt when its source
changes. Prints OUTDIR.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def digest(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def pip(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"build_wheelhouse: pip {args[0]} failed: {last}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent molecule/pytest runs build one at a time
        build(out)
    print(out)
    return 0


def build(out: Path) -> None:
    pyproject = ROOT / "pyproject.toml"
    deps_key = digest([pyproject])
    if (out / ".deps").exists() is False or (out / ".deps").read_text().strip() != deps_key:
        deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
        pip("wheel", "--wheel-dir", str(out), *deps)
        (out / ".deps").write_text(deps_key + "\n")
    src = [
        p
        for p in (ROOT / "controller" / "fleetmedic").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    self_key = digest([*src, pyproject])
    if not (out / ".self").exists() or (out / ".self").read_text().strip() != self_key:
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            pip("wheel", "--no-deps", "--wheel-dir", tmp, str(ROOT))
            for old in out.glob("fleetmedic-*.whl"):
                old.unlink()
            for new in Path(tmp).glob("fleetmedic-*.whl"):
                shutil.move(str(new), out / new.name)  # same filesystem: a rename
        (out / ".self").write_text(self_key + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
