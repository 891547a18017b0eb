#!/usr/bin/env bash
# `ansible-test sanity` on the collection as Galaxy users get it: the artifact that
# `ansible-galaxy collection build` makes (galaxy.yml's build_ignore leaves out the Python
# package, the tests and the benches; they have ruff, mypy and import-linter instead), unpacked
# at ansible_collections/<namespace>/<name>/ in a temporary directory, plus tests/sanity/ (the
# ignore file: every entry says why).
#
#   scripts/sanity.sh                 run every sanity test, offline (a stage of scripts/test.sh)
#   scripts/sanity.sh --prime-venvs   create ansible-test's per-test virtualenvs (setup.d/60-sanity.sh)
#
# ansible-test runs each test in a virtualenv of its own with pinned requirements (pylint,
# yamllint, voluptuous, ...). They live under the HOME that setup.d/60-sanity.sh prepares in
# the shared cache; the test run forbids pip any index (PIP_NO_INDEX), so it needs no network
# and fails loudly if a virtualenv is missing. Extra arguments go to ansible-test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
log() { printf '[sanity] %s\n' "$*" >&2; }

prime=()
if [[ ${1:-} == --prime-venvs ]]; then
  prime=(--prime-venvs); shift
  home="${ANSIBLE_TEST_HOME:?set by scripts/setup.d/60-sanity.sh}"
else
  home="$(bash scripts/setup.d/60-sanity.sh --print)"
  export PIP_NO_INDEX=1
fi
read -r ns name < <(python - <<'PY'
import yaml
g = yaml.safe_load(open("galaxy.yml"))
print(g["namespace"], g["name"])
PY
)
py="$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/$ns/$name"
mkdir -p "$dest/tests"
ansible-galaxy collection build --output-path "$work" >/dev/null
tar -xzf "$work/$ns-$name-"*.tar.gz -C "$dest"
cp -r tests/sanity "$dest/tests/"
log "$ns.$name as built, in $dest; Python $py"
cd "$dest"
out="$work/ansible-test.log"
rc=0
HOME="$home" ansible-test sanity --python "$py" --color no "${prime[@]}" "$@" 2>&1 | tee "$out" || rc=$?
# A test ansible-test leaves out (a program or Python missing) is a failure here too.
if ((${#prime[@]} == 0)) && grep -E "Required program .* not found|Skipping sanity test" "$out" >&2; then
  log "sanity tests were skipped (above): install what they need (scripts/setup.d/60-sanity.apt)"
  rc=1
fi
exit "$rc"
