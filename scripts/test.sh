#!/usr/bin/env bash
# The whole test suite. Run through `make test`, which installs first.
# Every stage runs even when an earlier one failed; the exit status says
# whether all passed, and the last lines list the stages that failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"
failed=()
stage() {  # stage NAME CMD...
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS
  if "$@"; then echo "== $name: ok ($((SECONDS - t0)) s)"; else failed+=("$name"); echo "== $name: FAILED ($((SECONDS - t0)) s)"; fi
}

stage "import layering (import-linter)" lint-imports --no-cache
stage "ruff lint (package)" ruff check controller
stage "ruff format (whole tree)" ruff format --check --quiet .
stage "mypy (package)" mypy
if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
  stage "ansible-lint (production profile)" ansible-lint --offline --profile production
fi
stage "collection build" ansible-galaxy collection build --force --output-path "$(mktemp -d)"
stage "pytest" pytest "$@"
for scenario in tests/molecule/*/molecule.yml; do
  [[ -e $scenario ]] || continue
  name="$(basename "$(dirname "$scenario")")"
  stage "molecule $name" env MOLECULE_GLOB='tests/molecule/*/molecule.yml' molecule test -s "$name"
done

if ((${#failed[@]})); then
  printf 'FAILED stages: %s\n' "${failed[*]}"
  exit 1
fi
echo "all stages passed"
