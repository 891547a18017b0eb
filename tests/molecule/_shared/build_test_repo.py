#!/usr/bin/env python3
"""Build the small local apt repository the driver-reinstall roles are tested against.

    python3 tests/molecule/_shared/build_test_repo.py OUTDIR

OUTDIR becomes a flat apt repository (``deb [trusted=yes] file:/srv/fm-test-repo ./``
once copied to a node) holding:

- test stand-ins for the NVIDIA driver (``fm-nvidia-kernel``, ``fm-nvidia-utils``, in two
  versions, so pinning and downgrades are exercised) and for ROCm (``fm-rocm-core``,
  ``fm-rocm``, ``fm-amdgpu-dkms``), built here with ``dpkg-deb``; their maintainer scripts
  log each configure to /var/log/fm-test-postinst.log so a test can count reinstalls;
- ``amdgpu-install``: a stand-in for AMD's installer package with the same command line
  (``-y``, ``--usecase=``, ``--no-dkms``, ``--uninstall``) that does what AMD's does, apt
  calls, but for the test packages (AMD's own would fetch ROCm from AMD's repositories);
- ``python3-apt`` and its two missing dependencies, fetched with ``apt-get download`` from
  this machine's configured Debian sources, since Ansible's apt module needs them and the
  test nodes cannot reach a Debian mirror.

The packages are real .debs installed by real apt and dpkg: only their payload is small.
Idempotent: a second run with the same inputs does nothing (keyed by this file's hash).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

KEY = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
NODE_REPO = "/srv/fm-test-repo"  # where the molecule prepare step copies the repository
DEBIAN_PACKAGES = ["python3-apt", "python-apt-common", "distro-info-data"]
POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
  echo "$DPKG_MAINTSCRIPT_PACKAGE $(dpkg-query -W -f='${Version}' "$DPKG_MAINTSCRIPT_PACKAGE") configure" \
    >> /var/log/fm-test-postinst.log
fi
"""

AMDGPU_INSTALL = r"""#!/bin/sh
# Test stand-in for AMD's amdgpu-install: same options, same apt calls, test packages.
set -e
yes=""; usecases=rocm; dkms=1; action=install
for a in "$@"; do
  case "$a" in
    -y) yes=-y ;;
    --usecase=*) usecases="${a#--usecase=}" ;;
    --no-dkms) dkms=0 ;;
    --uninstall) action=uninstall ;;
    *) echo "amdgpu-install: unknown option $a" >&2; exit 2 ;;
  esac
done
export DEBIAN_FRONTEND=noninteractive
if [ "$action" = uninstall ]; then
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' 'fm-rocm*' 'fm-amdgpu*' 2>/dev/null \
              | awk '$2 == "ii" {print $1}')
  if [ -n "$installed" ]; then
    apt-get purge $yes --allow-change-held-packages $installed
    apt-get autoremove $yes
  fi
  exit 0
fi
pkgs=""
for u in $(echo "$usecases" | tr , ' '); do
  case "$u" in
    rocm|hip|lrt) pkgs="$pkgs fm-rocm" ;;
    *) echo "amdgpu-install: unknown use case $u" >&2; exit 2 ;;
  esac
done
[ "$dkms" = 1 ] && pkgs="$pkgs fm-amdgpu-dkms"
apt-get install $yes --no-install-recommends $pkgs
"""


def package(
    name, version, files=None, depends=None, description="fleetmedic test package", scripts=None
):
    return dict(
        name=name,
        version=version,
        files=files or {},
        depends=depends or [],
        description=description,
        scripts=scripts if scripts is not None else {"postinst": POSTINST},
    )


def packages():
    out = []
    for ver in ("550.1-1", "550.2-1"):
        out.append(
            package(
                "fm-nvidia-kernel",
                ver,
                {
                    "usr/lib/fm-test/nvidia/nvidia.ko.txt": f"test kernel module {ver}\n",
                    "usr/lib/fm-test/nvidia/version": f"{ver}\n",
                },
            )
        )
        out.append(
            package(
                "fm-nvidia-utils",
                ver,
                {"usr/bin/fm-nvidia-smi": f"#!/bin/sh\necho 'fm-nvidia-smi {ver}'\n"},
                depends=[f"fm-nvidia-kernel (= {ver})"],
            )
        )
    out.append(
        package(
            "fm-rocm-core",
            "6.2.0-1",
            {
                "opt/rocm-6.2.0/lib/librocm-core.txt": "test rocm core 6.2.0\n",
                "opt/rocm-6.2.0/.info/version": "6.2.0\n",
            },
        )
    )
    out.append(package("fm-rocm", "6.2.0-1", {}, depends=["fm-rocm-core (= 6.2.0-1)"]))
    out.append(
        package(
            "fm-amdgpu-dkms",
            "6.8.5-1",
            {
                "usr/src/fm-amdgpu-6.8.5/dkms.conf": 'PACKAGE_NAME="fm-amdgpu"\nPACKAGE_VERSION="6.8.5"\n'
            },
        )
    )
    # Like AMD's, the installer package brings its release's apt source with it.
    out.append(
        package(
            "amdgpu-install",
            "6.2.60200-1",
            {
                "usr/bin/amdgpu-install": AMDGPU_INSTALL,
                "etc/apt/sources.list.d/fm-test-amdgpu.list": f"deb [trusted=yes] file:{NODE_REPO} ./\n",
            },
            scripts={},
            description="test stand-in for AMD's amdgpu-install",
        )
    )
    return out


def build_deb(spec, workdir: Path, outdir: Path) -> None:
    root = workdir / f"{spec['name']}_{spec['version']}"
    (root / "DEBIAN").mkdir(parents=True)
    for rel, content in spec["files"].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(0o755 if content.startswith("#!") else 0o644)
    control = textwrap.dedent(f"""\
        Package: {spec["name"]}
        Version: {spec["version"]}
        Architecture: all
        Maintainer: fleetmedic tests <tests@example.invalid>
        Section: misc
        Priority: optional
        Description: {spec["description"]}
        """)
    if spec["depends"]:
        control += f"Depends: {', '.join(spec['depends'])}\n"
    (root / "DEBIAN" / "control").write_text(control)
    for script, body in spec["scripts"].items():
        p = root / "DEBIAN" / script
        p.write_text(body)
        p.chmod(0o755)
    deb = outdir / f"{spec['name']}_{spec['version']}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs build one at a time
        return build(out)


def build(out: Path) -> int:
    stamp = out / ".built"
    if stamp.exists() and stamp.read_text().strip() == KEY:
        print(out)
        return 0
    tmp = Path(
        tempfile.mkdtemp(prefix="fm-test-repo-", dir=out.parent if out.parent.exists() else None)
    )
    try:
        repo = tmp / "repo"
        repo.mkdir()
        for spec in packages():
            build_deb(spec, tmp, repo)
        repo.chmod(0o755)
        # apt-get download writes to the current directory; it runs as root here (unsandboxed
        # when _apt cannot write the temporary directory, which is fine for this cache).
        dl = subprocess.run(
            ["apt-get", "download", "-q", *DEBIAN_PACKAGES],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        if dl.returncode != 0:
            last = (dl.stderr.strip().splitlines() or ["no output"])[-1]
            print(
                f"build_test_repo: apt-get download {' '.join(DEBIAN_PACKAGES)} failed: {last}",
                file=sys.stderr,
            )
            return 1
        index = subprocess.run(
            ["dpkg-scanpackages", "--multiversion", "."],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (repo / "Packages").write_text(index)
        subprocess.run(["gzip", "-9nk", "Packages"], cwd=repo, check=True)
        for p in repo.iterdir():
            p.chmod(0o644)
        (repo / ".built").write_text(KEY + "\n")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        repo.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
