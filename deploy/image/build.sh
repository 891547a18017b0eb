#!/usr/bin/env bash
# Build the node agent's image without any container registry (`make image`).
# Two layers, each cached by content in ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}:
#   base  image-base-<B>/layer.tar.gz   a Debian bookworm root filesystem from Debian's
#         packages (mmdebstrap, variant "essential": no apt, no package tools beyond the
#         essential set) with python3, iperf3 (the network probe) and ca-certificates
#         (kept in image-debian-<D>/, D = hash(suite, packages, mmdebstrap options), so a
#         change of Python dependencies downloads no Debian package again), and
#         the agent's Python dependencies (fleetmedic's runtime dependencies except the
#         controller-only ansible-core, ansible-runner, yagmail and receptorctl; versions of this
#         checkout's .venv) and a non-root user fleetmedic (10001:10001);
#         B = hash(this script, oci_archive.py, packages, dependencies)
#   app   image-<K>/                     the fleetmedic wheel and the `fleetmedic` command,
#         then the archive fleetmedic-agent-<version>.oci.tar (deploy/image/oci_archive.py):
#         an OCI image layout (+ Docker's manifest.json) that `ctr images import`,
#         `podman load` and `docker load` accept; K = hash(B, the package's sources)
# A code change rebuilds only the small app layer; a second run builds nothing.
#   deploy/image/build.sh            build what is missing; print the archive's path
#   deploy/image/build.sh --print    print the path, or exit 1 if not built
# Needs root (mmdebstrap chroot mode) and Debian's mmdebstrap. The Debian mirror is this
# machine's apt sources; no host name is written here.
# Env: FLEETMEDIC_IMAGE_NAME (default fleetmedic/fleetmedic:<version>).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/image"
CACHE="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
SUITE=bookworm
PACKAGES=(python3 iperf3 ca-certificates)
EXCLUDE=(ansible-core ansible-runner yagmail receptorctl)  # the agent never imports them
SITE=usr/local/lib/python3.11/dist-packages    # bookworm's python3 looks here
log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] error: %s\n' "$*" >&2; exit 1; }

PY=python3
[[ -x $ROOT/.venv/bin/python ]] && PY="$ROOT/.venv/bin/python"
VERSION="$("$PY" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")"
NAME="${FLEETMEDIC_IMAGE_NAME:-fleetmedic/fleetmedic:$VERSION}"

requirements() {  # pyproject's dependencies minus EXCLUDE, one per line
  "$PY" - "$ROOT/pyproject.toml" "${EXCLUDE[@]}" <<'EOF'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
skip = {s.lower() for s in sys.argv[2:]}
print("\n".join(sorted(d for d in deps if re.split(r"[<>=!~ \[;]", d)[0].lower() not in skip)))
EOF
}
constraints() {  # the versions this checkout tests with
  if [[ -x $ROOT/.venv/bin/pip ]]; then "$ROOT/.venv/bin/pip" freeze --exclude-editable; fi
}
sources_hash() {
  (cd "$ROOT" && { find controller/fleetmedic -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
      | LC_ALL=C sort | xargs sha256sum; sha256sum pyproject.toml README.md; })
}

MMDEBSTRAP_OPTS=(--variant=essential "--include=$(IFS=,; echo "${PACKAGES[*]}")"
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*')
DKEY="$(printf '%s\n' "$SUITE" "${MMDEBSTRAP_OPTS[@]}" | sha256sum | cut -c1-12)"
DEBIAN="$CACHE/image-debian-$DKEY"
BKEY="$( { echo "$DKEY"; cat "${BASH_SOURCE[0]}" "$HERE/oci_archive.py"; requirements; constraints; } \
         | sha256sum | cut -c1-12)"
KEY="$( { echo "$BKEY $NAME"; sources_hash; } | sha256sum | cut -c1-12)"
BASE="$CACHE/image-base-$BKEY"
OUT="$CACHE/image-$KEY"
ARCHIVE="$OUT/fleetmedic-agent-$VERSION.oci.tar"

if [[ ${1:-} == --print ]]; then
  [[ -f $ARCHIVE ]] || { echo "agent image not built ($ARCHIVE); run: make image" >&2; exit 1; }
  echo "$ARCHIVE"; exit 0
fi
if [[ -f $ARCHIVE ]]; then
  log "cached: $ARCHIVE ($(du -m "$ARCHIVE" | cut -f1) MB)"; echo "$ARCHIVE"; exit 0
fi
[[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap)"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found; run: bash scripts/setup.sh"
mkdir -p "$CACHE"
exec 9>"$CACHE/.image.lock"; flock 9
if [[ -f $ARCHIVE ]]; then log "cached: $ARCHIVE"; echo "$ARCHIVE"; exit 0; fi
t0=$SECONDS

build_debian() {
  local tmp="$CACHE/.build-image-debian-$DKEY" sources=() f t=$SECONDS
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && sources+=("$f")
  done
  log "debian: mmdebstrap $SUITE essential + ${PACKAGES[*]} (log: $tmp.log)"
  mmdebstrap "${MMDEBSTRAP_OPTS[@]}" "$SUITE" "$tmp/rootfs" "${sources[@]}" >"$tmp.log" 2>&1 \
    || die "mmdebstrap failed; last lines: $(tail -3 "$tmp.log" | tr '\n' ' ')"
  r="$tmp/rootfs"
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* "$r"/var/cache/debconf/*-old \
    "$r"/var/log/* "$r"/var/lib/dpkg/*-old
  rm -rf "$DEBIAN"; mkdir -p "$DEBIAN"; mv "$r" "$DEBIAN/rootfs"; rm -rf "$tmp" "$tmp.log"
  trap - EXIT
  log "debian: $((SECONDS - t)) s, $(du -sm "$DEBIAN/rootfs" | cut -f1) MB"
}

build_base() {
  local tmp="$CACHE/.build-image-base-$BKEY" blog r
  rm -rf "$tmp"; mkdir -p "$tmp/wheels"
  trap 'rm -rf "$tmp"' EXIT
  blog="$tmp/build.log"; r="$tmp/rootfs"
  cp -a "$DEBIAN/rootfs" "$r"
  requirements > "$tmp/requirements.txt"
  constraints > "$tmp/constraints.txt"
  log "base: $(wc -l < "$tmp/requirements.txt") Python dependencies"
  "$PY" -m pip wheel -q --wheel-dir "$tmp/wheels" -r "$tmp/requirements.txt" -c "$tmp/constraints.txt" \
    >>"$blog" 2>&1 || die "pip wheel failed; see $blog"
  mkdir -p "$r/$SITE"
  "$PY" -m pip install -q --no-index --find-links "$tmp/wheels" --target "$r/$SITE" \
    -r "$tmp/requirements.txt" -c "$tmp/constraints.txt" >>"$blog" 2>&1 \
    || die "pip install failed; see $blog"
  rm -rf "$r/$SITE/bin"  # console scripts naming this machine's interpreter
  # kubernetes 37 ships an asyncio copy of its whole client (68 of its 126 MB); the
  # agent uses the synchronous one, and nothing imports kubernetes.aio unless asked.
  rm -rf "$r/$SITE/kubernetes/aio"
  # Bytecode that stays valid: the layer clamps file times (reproducible), which makes
  # timestamp-checked .pyc files stale, and a read-only root cannot rewrite them; the
  # agent would compile the kubernetes client at every start (~20 s on a busy node).
  chroot "$r" /usr/bin/python3 -m compileall -q -f -j 2 --invalidation-mode unchecked-hash \
    "/$SITE" >>"$blog" 2>&1 || die "compileall failed; see $blog"
  echo "fleetmedic:x:10001:10001:fleetmedic agent:/nonexistent:/usr/sbin/nologin" >> "$r/etc/passwd"
  echo "fleetmedic:x:10001:" >> "$r/etc/group"
  echo "fleetmedic:*:20000:0:99999:7:::" >> "$r/etc/shadow"
  : > "$r/etc/machine-id"
  stat -c %Y "$r/var/lib/dpkg/status" > "$tmp/epoch"  # the newest package: layer times
  "$PY" "$HERE/oci_archive.py" layer "$r" "$tmp/layer.tar.gz" --epoch "$(cat "$tmp/epoch")" \
    >>"$blog" 2>&1 || die "base layer failed; see $blog"
  du -sm "$r" | cut -f1 > "$tmp/rootfs-mb"
  rm -rf "$BASE"; mkdir -p "$BASE"
  mv "$tmp/layer.tar.gz" "$tmp/layer.tar.gz.json" "$tmp/epoch" "$tmp/rootfs-mb" "$BASE/"
  mv "$r" "$BASE/rootfs"   # kept for the app layer's import check
  rm -rf "$tmp"; trap - EXIT
  log "base built in $((SECONDS - t0)) s: $BASE ($(cat "$BASE/rootfs-mb") MB unpacked)"
}

build_app() {
  local tmp="$CACHE/.build-image-$KEY" blog epoch t1=$SECONDS
  rm -rf "$tmp"; mkdir -p "$tmp/wheels" "$tmp/app/$SITE" "$tmp/app/usr/local/bin" "$tmp/check"
  trap 'umount "$tmp/check" 2>/dev/null || true; rm -rf "$tmp"' EXIT
  blog="$tmp/build.log"
  "$PY" -m pip wheel -q --no-deps --wheel-dir "$tmp/wheels" "$ROOT" >"$blog" 2>&1 \
    || die "pip wheel fleetmedic failed; see $blog"
  "$PY" -m pip install -q --no-index --no-deps --target "$tmp/app/$SITE" "$tmp"/wheels/fleetmedic-*.whl \
    >>"$blog" 2>&1 || die "pip install fleetmedic failed; see $blog"
  rm -rf "$tmp/app/$SITE/bin"
  "$PY" -m compileall -q -f --invalidation-mode unchecked-hash "$tmp/app/$SITE" >>"$blog" 2>&1 \
    || die "compileall failed; see $blog"  # the same CPython 3.11 bytecode as the image's
  printf '#!/usr/bin/python3\nimport sys\nfrom fleetmedic.cli import main\nsys.exit(main())\n' \
    > "$tmp/app/usr/local/bin/fleetmedic"
  chmod 755 "$tmp/app/usr/local/bin/fleetmedic"
  # The image's own python must run the agent's command line (both layers together).
  mount -t overlay overlay -o "lowerdir=$tmp/app:$BASE/rootfs" "$tmp/check"
  chroot "$tmp/check" /usr/local/bin/fleetmedic agent --help >>"$blog" 2>&1 \
    || die "the image cannot run 'fleetmedic agent --help'; see $blog"
  chroot "$tmp/check" /usr/bin/python3 -c 'import fleetmedic.agent.loop, fleetmedic.checks, pynvml' \
    >>"$blog" 2>&1 || die "the image cannot import the agent; see $blog"
  umount "$tmp/check"
  epoch="$(cat "$BASE/epoch")"
  "$PY" "$HERE/oci_archive.py" layer "$tmp/app" "$tmp/app.tar.gz" --epoch "$epoch" >>"$blog" 2>&1 \
    || die "app layer failed; see $blog"
  mkdir -p "$OUT.tmp"
  "$PY" "$HERE/oci_archive.py" image "$OUT.tmp/$(basename "$ARCHIVE")" \
    --layer "$BASE/layer.tar.gz" --layer "$tmp/app.tar.gz" --name "$NAME" \
    --entrypoint fleetmedic --cmd agent --user 10001:10001 --epoch "$epoch" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHONDONTWRITEBYTECODE=1 \
    --label "org.opencontainers.image.title=fleetmedic agent" \
    --label "org.opencontainers.image.description=fleetmedic node agent: GPU and network checks, kernel-log watch, fencing taints" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    --label "org.opencontainers.image.base.name=debian:$SUITE (Debian packages, mmdebstrap)" \
    >>"$blog" 2>&1 || die "oci_archive image failed; see $blog"
  rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
  rm -rf "$tmp"; trap - EXIT
  log "app layer and archive in $((SECONDS - t1)) s"
}

[[ -f $BASE/layer.tar.gz && -d $BASE/rootfs ]] || {
  [[ -d $DEBIAN/rootfs ]] || build_debian
  build_base
}
build_app
log "built in $((SECONDS - t0)) s: $ARCHIVE ($(du -m "$ARCHIVE" | cut -f1) MB)"
# Images and bases nobody built or used for two days go (other checkouts have their own).
find "$CACHE" -maxdepth 1 -name 'image-*' -type d -mtime +2 \
  ! -path "$OUT" ! -path "$BASE" ! -path "$DEBIAN" -exec rm -rf {} + 2>/dev/null || true
touch "$DEBIAN" "$BASE" "$OUT"
echo "$ARCHIVE"
