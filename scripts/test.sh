#!/usr/bin/env bash
# The whole test suite. Run through `make test`, which installs first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"

echo "== import layering (import-linter)"
lint-imports --no-cache

if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
  echo "== ansible-lint (production profile)"
  ansible-lint --offline --profile production
fi

echo "== pytest"
pytest "$@"

if compgen -G "tests/molecule/*/molecule.yml" >/dev/null; then
  echo "== molecule"
  for scenario in tests/molecule/*/molecule.yml; do
    name="$(basename "$(dirname "$scenario")")"
    MOLECULE_GLOB='tests/molecule/*/molecule.yml' molecule test -s "$name"
  done
fi
