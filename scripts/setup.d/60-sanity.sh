#!/usr/bin/env bash
# ansible-test sanity's per-test virtualenvs, created once so that the test stage
# (scripts/sanity.sh) runs without network. They live in a HOME of their own in the cache,
# keyed by ansible-core's and Python's versions and the layout of what this script writes:
#   ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}/ansible-test-<ansible-core>-py<X.Y>-<key>/home
#   60-sanity.sh            create what is missing
#   60-sanity.sh --print    print that HOME; exit 1 if it is not ready
# ansible-test makes each virtualenv without pip, then bootstraps pip with a get-pip script
# it downloads from its own CI file host, which this machine cannot reach. It first looks
# for that script in ~/.ansible/test/cache/get_pip_<version>.py; we put a stand-in of ours
# there: pip from the interpreter's own ensurepip, then `pip install` of what ansible-test
# asks for (pip itself at its pinned version) from the configured index, like every other
# requirement it installs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
log() { printf '[60-sanity] %s\n' "$*" >&2; }

core="$("$PY" -c 'import ansible; print(ansible.__version__)')"
pyv="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# LAYOUT: bump it when what this script puts into the HOME changes (the stand-in below).
LAYOUT=1
key="$(echo "$core $pyv $LAYOUT" | sha256sum | cut -c1-12)"
cache="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
out="$cache/ansible-test-$core-py$pyv-$key"
ready() { [[ -f $out/.ready ]]; }

if [[ ${1:-} == --print ]]; then
  ready || { echo "ansible-test virtualenvs not ready ($out); run: bash scripts/setup.sh" >&2; exit 1; }
  echo "$out/home"; exit 0
fi
if ready; then log "cached: $out"; exit 0; fi
mkdir -p "$cache"
exec 9>"$out.lock"
flock 9
if ready; then log "cached: $out"; exit 0; fi

start=$SECONDS
rm -rf "$out"; mkdir -p "$out/home/.ansible/test/cache"
pip_version="$("$PY" - "$pyv" <<'PY'
import sys
from ansible_test._internal.python_requirements import get_venv_packages

class Python:
    version = sys.argv[1]

print(get_venv_packages(Python())["pip"])
PY
)"
cat > "$out/home/.ansible/test/cache/get_pip_${pip_version//./_}.py" <<'PY'
"""fleetmedic's stand-in for get-pip.py (scripts/setup.d/60-sanity.sh), run by ansible-test
in a new virtualenv with pip's arguments: the packages to install (pip==X.Y first)."""
import subprocess
import sys

# in a child: ensurepip points PIP_CONFIG_FILE at /dev/null in its own environment
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
PY
log "ansible-test $core: creating its sanity virtualenvs for Python $pyv in $out (log: $out.log)"
if ! ANSIBLE_TEST_HOME="$out/home" bash "$ROOT/scripts/sanity.sh" --prime-venvs >"$out.log" 2>&1; then
  log "failed; last lines of $out.log:"; tail -5 "$out.log" >&2; exit 1
fi
touch "$out/.ready"
log "ready in $((SECONDS - start)) s: $out ($(du -sm "$out" | cut -f1) MB)"
