#!/usr/bin/env bash
# One more overlay layer over the nspawn node tree (20-nodetree.sh) with Debian's slurmd
# and Slurm's client tools, for the Slurm test fleet (tests/harness/slurmfleet.py):
#   /var/cache/fleetmedic/nodetree-<K>/slurm-<S>   S = hash(node tree lowerdir, PACKAGES,
#                                                 this script)
# Only Slurm fleets put it on top of their nodes' lowerdir; the plain fleet's tree and
# cache key stay as they are. Built the way the node venv layer is: an overlay over the
# tree, packages installed in a chroot, the upper directory kept. The packages come from
# this machine's apt sources (the same Slurm build as the host's slurmctld), at build time
# on the host network; the nodes themselves reach no mirror.
#   22-nodetree-slurm.sh            build what is missing (builds the node tree first)
#   22-nodetree-slurm.sh --print    print the Slurm fleet's overlay lowerdir; exit 1 if
#                                   not built
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
# slurm-client: scontrol/sinfo on the node (an agent that fences through scontrol).
PACKAGES=(slurmd slurm-client)
log() { printf '[nodetree-slurm] %s\n' "$*" >&2; }
die() { printf '[nodetree-slurm] error: %s\n' "$*" >&2; exit 1; }

tree_lower() { bash "$HERE/20-nodetree.sh" --print 2>/dev/null; }

layer_dir() {  # <tree lowerdir>: the layer's directory for it
  local lower=$1 rootfs key
  rootfs="${lower##*:}"
  key="$( { echo "$lower"; printf '%s\n' "${PACKAGES[@]}"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
  echo "$(dirname "$rootfs")/slurm-$key"
}

if [[ ${1:-} == --print ]]; then
  lower="$(tree_lower)" || { echo "node tree not built; run: bash scripts/setup.sh" >&2; exit 1; }
  layer="$(layer_dir "$lower")"
  [[ -d $layer ]] || { echo "Slurm node layer not built ($layer); run: bash $HERE/22-nodetree-slurm.sh" >&2; exit 1; }
  echo "$layer:$lower"
  exit 0
fi
[[ $(id -u) == 0 ]] || die "must run as root"
# The node tree first (a no-op when it is cached; waits for a build in progress).
bash "$HERE/20-nodetree.sh"
lower="$(tree_lower)" || die "node tree not built"
LAYER="$(layer_dir "$lower")"

cleanup_mounts() {  # unmount everything below $1 (deepest first)
  local m
  for m in $(awk -v p="$1" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

build_layer() {
  local tmp="$CACHE/.build-slurm-${LAYER##*/slurm-}" t0=$SECONDS
  cleanup_mounts "$tmp"; rm -rf "$tmp"
  mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged" "$tmp/sources"
  trap 'cleanup_mounts "$tmp"' EXIT
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/merged"
  local m="$tmp/merged"
  # The host's enabled Debian sources, for this build only (the tree keeps its own).
  cp /etc/apt/sources.list.d/*.sources "$tmp/sources/" 2>/dev/null || true
  [[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$tmp/sources/host.list"
  mkdir -p "$m/tmp/apt-sources" "$m/tmp/apt-lists/partial"
  mount --bind "$tmp/sources" "$m/tmp/apt-sources"
  mount -t proc proc "$m/proc"
  mount --bind /etc/resolv.conf "$m/etc/resolv.conf"   # the tree has no DNS; the build does
  printf '#!/bin/sh\nexit 101\n' > "$m/usr/sbin/policy-rc.d"   # start no daemon in the chroot
  chmod 755 "$m/usr/sbin/policy-rc.d"
  local apt=(chroot "$m" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
             DEBIAN_FRONTEND=noninteractive apt-get -qq
             -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/tmp/apt-sources
             -o Dir::State::Lists=/tmp/apt-lists)
  log "installing ${PACKAGES[*]} into the node tree (chroot apt); log: $tmp.log"
  "${apt[@]}" update --error-on=any >"$tmp.log" 2>&1 || die "apt-get update failed; see $tmp.log"
  "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" >>"$tmp.log" 2>&1 \
    || die "apt-get install failed; see $tmp.log"
  "${apt[@]}" clean >>"$tmp.log" 2>&1
  rm -f "$m/usr/sbin/policy-rc.d"
  # The node uses the Slurm cluster's munged (its socket is bound in), not one of its own.
  ln -sfn /dev/null "$m/etc/systemd/system/munge.service"
  # slurmd starts at boot once /etc/slurm/slurm.conf is there (the harness binds it in).
  mkdir -p "$m/etc/systemd/system/multi-user.target.wants"
  ln -sfn /lib/systemd/system/slurmd.service "$m/etc/systemd/system/multi-user.target.wants/slurmd.service"
  umount "$m/proc" "$m/tmp/apt-sources" "$m/etc/resolv.conf"
  rm -rf "$m/tmp/apt-sources" "$m/tmp/apt-lists" "$m/root/.cache"
  umount "$m"
  # This layer adds and never removes: ldconfig deleted the tree's dangling
  # libnvidia-ml.so.1 link (the fake NVML, bound in at boot), which left a whiteout here.
  local w
  while IFS= read -r w; do
    [[ $(stat -c %t:%T "$w") == 0:0 ]] || continue
    log "keeping the tree's ${w#"$tmp/upper"} (dropping the build's whiteout)"; rm -f "$w"
  done < <(find "$tmp/upper" -type c)
  trap - EXIT
  mkdir -p "$(dirname "$LAYER")"
  mv "$tmp/upper" "$LAYER"; rm -rf "$tmp" "$tmp.log"
  log "Slurm node layer ready in $((SECONDS - t0)) s: $LAYER ($(du -sm "$LAYER" | cut -f1) MB)"
}

exec 8>"$CACHE/.nodetree-slurm.lock"; flock 8
if [[ -d $LAYER ]]; then
  log "cached: $LAYER"
else
  build_layer
fi
# Layers of other keys of this tree, unless a running fleet still uses them.
for d in "$(dirname "$LAYER")"/slurm-*; do
  [[ -d $d && $d != "$LAYER" ]] || continue
  grep -qF "$d" /proc/self/mountinfo && continue
  log "removing old $d"; rm -rf "$d"
done
