#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine (root): apt packages, the
# virtualenv at .venv with fleetmedic installed, then every component step in
# scripts/setup.d/*.sh (Go-built test servers, the nspawn node tree, fakes).
# A second run installs and builds nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[setup] %s\n' "$*" >&2; }

# CI builds everything: the FLEETMEDIC_*_SKIP switches (skip a build, then its tests) are
# refused there, as scripts/test.sh and tests/conftest.py refuse them.
if [[ ${CI:-} == true ]]; then
  switches="$(env | sed -n 's/^\(FLEETMEDIC_[A-Z0-9_]*_SKIP\)=.\+$/\1/p' | tr '\n' ' ')"
  [[ -z $switches ]] || { log "refused under CI=true: ${switches% } (CI runs every test)"; exit 2; }
fi

# --- apt: each component lists what it needs in scripts/setup.d/*.apt
mapfile -t want < <(cat scripts/setup.d/*.apt 2>/dev/null | sed 's/#.*//' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- virtualenv with fleetmedic and its test extras
PY="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.fleetmedic-installed
want_stamp="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want_stamp" ]]; then
  log "pip: installing fleetmedic[test] into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test]'
  echo "$want_stamp" > "$stamp"
fi

# --- component steps (each is idempotent and caches by version)
export PATH="$ROOT/.venv/bin:$PATH"
for step in scripts/setup.d/*.sh; do
  [[ -e $step ]] || continue
  log "step: ${step#scripts/setup.d/}"
  bash "$step"
done
log "ready"
