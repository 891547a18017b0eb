#!/usr/bin/env bash
# The Slurm 24.11 node tree: Debian 13 (trixie), built the way the Debian 12 one is and
# cached by content beside it (scripts/setup.d/20-nodetree.sh and 22-nodetree-slurm.sh with
# FLEETMEDIC_NODETREE_SUITE=trixie):
#   /var/cache/fleetmedic/nodetree-trixie-<K>/rootfs       debootstrap trixie minbase
#   /var/cache/fleetmedic/nodetree-trixie-<K>/venv-<V>     fleetmedic's deps for Python 3.13
#   /var/cache/fleetmedic/nodetree-trixie-<K>/slurm-<S>    slurmd, slurm-client, slurmctld,
#                                                          slurmrestd, munge 24.11 / 0.5.16
# Debian 13's packages come from the same mirror as the host's (read from its apt sources at
# run time) and go only into this tree: the Debian 12 host keeps its own libc and Slurm
# 22.05. The 24.11 test cluster (tests/harness/slurm24.py) runs every daemon and client
# tool from this tree, its nodes boot from it.
#   24-nodetree-trixie.sh            build what is missing
#   24-nodetree-trixie.sh --print    print the 24.11 nodes' overlay lowerdir; exit 1 if not built
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export FLEETMEDIC_NODETREE_SUITE=trixie
if [[ ${1:-} == --print ]]; then
  exec bash "$HERE/22-nodetree-slurm.sh" --print
fi
bash "$HERE/20-nodetree.sh"
bash "$HERE/22-nodetree-slurm.sh"
