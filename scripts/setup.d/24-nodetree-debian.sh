#!/usr/bin/env bash
# A Debian node tree per Slurm release: for each release in scripts/slurm-releases.toml
# that names a Debian suite (24.11: trixie, Debian 13; 26.05: forky, Debian 14), that
# suite's slurm-wlm for the release's test clusters and fleets (tests/harness/slurm24.py,
# slurmfleet.py), built once and cached by content in two overlay layers beside the
# Debian 12 tree (20-nodetree.sh):
#   /var/cache/fleetmedic/debian<N>-<K>/rootfs    debootstrap <suite> minbase + the nodes'
#                                                 packages + slurmd, slurm-client,
#                                                 slurmctld, slurmrestd and munge,
#                                                 K = hash(suite, packages, this script)
#   /var/cache/fleetmedic/debian<N>-<K>/venv-<V>  /opt/fleetmedic/venv on the tree's Python
#                                                 with fleetmedic's runtime deps (the
#                                                 agent, prologs and health checks run in
#                                                 fleet nodes booted from the tree),
#                                                 V = hash(K, deps from pyproject.toml)
# The suites' packages come from the same mirror as the host's Debian 12 (the host's apt
# sources name it; read at run time, no host name is written here) and go only into these
# trees: the host keeps its own libc and Slurm 22.05. Their own directory names (not
# nodetree-*) and locks keep them apart from 20-nodetree.sh, whose prune removes trees of
# other keys. A new release is one entry in scripts/slurm-releases.toml.
#   24-nodetree-debian.sh                 build every release's missing tree, then remove
#                                         the trees and venvs of other keys (setup.sh)
#   24-nodetree-debian.sh 26.05 [...]     build those releases' trees if missing, no
#                                         removal (the harness's call, a desk run's)
#   24-nodetree-debian.sh --print 26.05   print the release's overlay lowerdir; exit 1 if
#                                         it is not built
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
RELEASES_TOML="$ROOT/scripts/slurm-releases.toml"
# The nodes' packages, as 20-nodetree.sh's, and Slurm: slurmd and the client tools for the
# nodes, slurmctld, slurmrestd and munge for the cluster's daemons (run chrooted in the
# tree on the host).
PACKAGES=(systemd systemd-sysv dbus openssh-server python3 python3-venv python3-apt sudo
          iproute2 iputils-ping iperf3 procps ca-certificates less
          slurmd slurm-client slurmctld slurmrestd munge)
TAG=debian
log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$TAG" "$*" >&2; exit 1; }

PY=python3
[[ -x $ROOT/.venv/bin/python ]] && PY="$ROOT/.venv/bin/python"

# Runtime dependencies of fleetmedic, one per line, from pyproject.toml.
deps() {
  "$PY" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(sorted(tomllib.load(f)["project"]["dependencies"])))
EOF
}

# The releases with a tree: "<slurm> <suite> <debian>" per line.
releases() {
  "$PY" - "$RELEASES_TOML" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    for r in tomllib.load(f)["release"]:
        if r.get("suite"):
            print(r["slurm"], r["suite"], r["debian"])
EOF
}

# select_release RELEASE: set its RELEASE, SUITE, NUM, KEY, VKEY, DIR, ROOTFS, VENV
select_release() {
  local line
  line="$(releases | awk -v r="$1" '$1 == r')"
  [[ -n $line ]] || die "Slurm $1 has no Debian tree in $RELEASES_TOML (those with one: $(releases | cut -d' ' -f1 | xargs))"
  read -r RELEASE SUITE NUM <<<"$line"
  TAG="debian$NUM"
  KEY="$( { echo "$SUITE"; printf '%s\n' "${PACKAGES[@]}"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
  VKEY="$( { echo "$KEY"; deps; } | sha256sum | cut -c1-12)"
  DIR="$CACHE/debian$NUM-$KEY"
  ROOTFS="$DIR/rootfs"
  VENV="$DIR/venv-$VKEY"
}

if [[ ${1:-} == --print ]]; then
  [[ -n ${2:-} ]] || die "usage: $0 --print RELEASE"
  select_release "$2"
  [[ -d $ROOTFS && -d $VENV ]] || { echo "Debian $NUM tree of Slurm $RELEASE not built ($DIR); run: bash $0 $RELEASE" >&2; exit 1; }
  echo "$VENV:$ROOTFS"
  exit 0
fi
[[ $(id -u) == 0 ]] || die "must run as root"

# The Debian archive's URI from the machine's apt sources (its own suite's entry, not
# -security), if any: the same archive serves every suite.
mirror() {
  "$PY" - "$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")" <<'EOF'
import glob, sys
suite = sys.argv[1]
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        f = {}
        for line in stanza.splitlines():
            if ":" in line and not line.lstrip().startswith("#"):
                k, v = line.split(":", 1)
                f[k.strip().lower()] = v.split()
        if "deb" in f.get("types", []) and suite in f.get("suites", []) and f.get("uris"):
            print(f["uris"][0]); sys.exit()
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        w = [x for x in line.split() if not x.startswith("[")]
        if len(w) >= 3 and w[0] == "deb" and w[2] == suite:
            print(w[1]); sys.exit()
EOF
}

cleanup_mounts() {  # unmount everything below $1 (deepest first)
  local m
  for m in $(awk -v p="$1" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

build_rootfs() {
  local tmp="$CACHE/.build-debian$NUM-$KEY" url script=""
  cleanup_mounts "$tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  url="$(mirror)"
  log "debootstrap $SUITE minbase (${#PACKAGES[@]} packages${url:+, mirror from apt sources}); log: $tmp.log"
  local t0=$SECONDS
  # A suite newer than the host's debootstrap (forky for Debian 12's) bootstraps as sid's
  # script does (trixie's is a link to it); that argument needs the mirror's.
  if [[ ! -e /usr/share/debootstrap/scripts/$SUITE ]]; then
    [[ -n $url ]] || die "debootstrap has no script for $SUITE and the apt sources name no mirror"
    script=/usr/share/debootstrap/scripts/sid
  fi
  # shellcheck disable=SC2086
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
        "$SUITE" "$tmp/rootfs" ${url:+"$url"} ${script:+"$script"} >"$tmp.log" 2>&1; then
    die "debootstrap failed; last lines of $tmp.log: $(tail -3 "$tmp.log" | tr '\n' ' ')"
  fi
  local r="$tmp/rootfs"
  # The node preparation of 20-nodetree.sh, line for line (tests/unit/scripts checks it):
  # per-node identity is written by the harness: host keys, machine-id, hostname, hosts.
  rm -f "$r"/etc/ssh/ssh_host_*
  : > "$r/etc/machine-id"
  mkdir -p "$r/var/lib/dbus"; ln -sfn /etc/machine-id "$r/var/lib/dbus/machine-id"
  echo localhost > "$r/etc/hostname"
  : > "$r/etc/resolv.conf"            # nodes have no DNS; /etc/hosts names the fleet
  cat > "$r/etc/ssh/sshd_config.d/fleetmedic.conf" <<'EOF'
# fleetmedic test node: key-only root login, one per-node host key, no DNS lookups
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
  mkdir -p "$r/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n' > "$r/etc/systemd/journald.conf.d/fleetmedic.conf"
  # Units a container does not need and that slow boot or wake up at random.
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
           man-db.timer dpkg-db-backup.timer systemd-timesyncd.service iperf3.service \
           systemd-networkd-wait-online.service getty@tty1.service; do
    ln -sfn /dev/null "$r/etc/systemd/system/$u"
  done
  install -d -m 700 "$r/root/.ssh"
  # Fake GPU tools (tests/fakes/build, bind-mounted at boot when it exists); dangling
  # links look like "not installed".
  mkdir -p "$r/opt/fleetmedic-fakes" "$r/opt/fleetmedic/src" "$r/var/lib/fleetmedic-test"
  ln -sfn /opt/fleetmedic-fakes/lib/libnvidia-ml.so.1 "$r/usr/lib/libnvidia-ml.so.1"
  for u in amd-smi rocm-smi rocminfo; do ln -sfn "/opt/fleetmedic-fakes/bin/$u" "$r/usr/local/bin/$u"; done
  # Slurm, as 22-nodetree-slurm.sh prepares the Debian 12 nodes: a node uses the cluster's
  # munged (its socket is bound in) and starts slurmd at boot once the harness binds
  # /etc/slurm/slurm.conf in; the cluster's daemons run from the host, never at boot.
  for u in munge.service slurmctld.service slurmrestd.service; do
    ln -sfn /dev/null "$r/etc/systemd/system/$u"
  done
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
  ln -sfn /lib/systemd/system/slurmd.service "$r/etc/systemd/system/multi-user.target.wants/slurmd.service"
  chroot "$r" apt-get clean
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/log/*.log
  mkdir -p "$DIR"; mv "$r" "$ROOTFS"; rm -rf "$tmp" "$tmp.log"
  log "rootfs ready in $((SECONDS - t0)) s: $ROOTFS ($(du -sm "$ROOTFS" | cut -f1) MB)"
}

build_venv() {
  local tmp="$CACHE/.build-debian$NUM-venv-$VKEY" t0=$SECONDS node_py t
  cleanup_mounts "$tmp"; rm -rf "$tmp"
  mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged" "$tmp/wheels"
  trap 'cleanup_mounts "$tmp"' EXIT
  deps > "$tmp/requirements.txt"
  # Same versions as the controller's .venv when it exists.
  : > "$tmp/constraints.txt"
  [[ -x $ROOT/.venv/bin/pip ]] && "$ROOT/.venv/bin/pip" freeze --exclude-editable > "$tmp/constraints.txt"
  # The tree's Python is not the host's: its binary wheels, downloaded by the host from its
  # configured index (the tree has no compiler; every dependency publishes such wheels).
  node_py="$(chroot "$ROOTFS" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  log "node venv: Python $node_py wheels for $(wc -l < "$tmp/requirements.txt") deps; log: $tmp.log"
  local tags=()
  for t in manylinux2014 manylinux_2_17 manylinux_2_28 manylinux_2_34; do tags+=(--platform "${t}_x86_64"); done
  "$PY" -m pip download -q --only-binary=:all: --python-version "$node_py" --implementation cp \
    --abi "cp${node_py/./}" --abi abi3 --abi none "${tags[@]}" --platform any \
    --dest "$tmp/wheels" -r "$tmp/requirements.txt" -c "$tmp/constraints.txt" >"$tmp.log" 2>&1 \
    || die "pip download failed; see $tmp.log"
  mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/merged"
  mkdir -p "$tmp/merged/tmp/wheels"
  mount --bind "$tmp/wheels" "$tmp/merged/tmp/wheels"
  cp "$tmp/requirements.txt" "$tmp/constraints.txt" "$tmp/merged/tmp/"
  local ch=(chroot "$tmp/merged" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
  "${ch[@]}" python3 -m venv /opt/fleetmedic/venv >>"$tmp.log" 2>&1 || die "venv failed; see $tmp.log"
  "${ch[@]}" /opt/fleetmedic/venv/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels \
    -r /tmp/requirements.txt -c /tmp/constraints.txt >>"$tmp.log" 2>&1 || die "pip install in node venv failed; see $tmp.log"
  local site
  site="$(cd "$tmp/merged" && echo opt/fleetmedic/venv/lib/python3*/site-packages)"
  echo /opt/fleetmedic/src > "$tmp/merged/$site/fleetmedic-src.pth"
  printf '#!/bin/sh\nexec /opt/fleetmedic/venv/bin/python -m fleetmedic "$@"\n' > "$tmp/merged/usr/local/bin/fleetmedic"
  chmod 755 "$tmp/merged/usr/local/bin/fleetmedic"
  umount "$tmp/merged/tmp/wheels"
  rm -rf "$tmp/merged/tmp/wheels" "$tmp/merged/tmp/requirements.txt" "$tmp/merged/tmp/constraints.txt" "$tmp/merged/root/.cache"
  umount "$tmp/merged"
  trap - EXIT
  mv "$tmp/upper" "$VENV"; rm -rf "$tmp" "$tmp.log"
  log "node venv ready in $((SECONDS - t0)) s: $VENV ($(du -sm "$VENV" | cut -f1) MB)"
}

# Remove the release's cached trees/venvs of other keys unless something still mounts them.
prune() {
  local d
  for d in "$CACHE"/debian"$NUM"-* "$DIR"/venv-*; do
    [[ -d $d && $d != "$DIR" && $d != "$VENV" ]] || continue
    if grep -qF "$d" /proc/self/mountinfo; then continue; fi
    log "removing old $d"; rm -rf "$d"
  done
}

# build RELEASE: its tree and venv if missing, under the release's lock (fd 9)
build() {
  select_release "$1"
  exec 9>"$CACHE/.debian$NUM.lock"; flock 9
  if [[ -d $ROOTFS && -d $VENV ]]; then
    log "cached: Slurm $RELEASE in $DIR (venv-$VKEY)"
  else
    [[ -d $ROOTFS ]] || build_rootfs
    [[ -d $VENV ]] || build_venv
  fi
}

mkdir -p "$CACHE"
if (($#)); then
  for r in "$@"; do build "$r"; exec 9>&-; done
else
  for r in $(releases | cut -d' ' -f1); do build "$r"; prune; exec 9>&-; done
fi
