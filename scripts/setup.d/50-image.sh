#!/usr/bin/env bash
# The agent's OCI image for the DaemonSet tests (tests/integration/test_agent_daemonset.py),
# built by deploy/image/build.sh and cached by content (`make image` is the same).
# Env: FLEETMEDIC_IMAGE_SKIP=1 to skip.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ ${FLEETMEDIC_IMAGE_SKIP:-} == 1 ]] && { echo "[image] skipped (FLEETMEDIC_IMAGE_SKIP=1)" >&2; exit 0; }
bash "$ROOT/deploy/image/build.sh" >/dev/null
