#!/usr/bin/env bash
# Build the test Loki (single binary) and promtool from the Go module pinned in
# tests/loki. promtool comes from the Prometheus module Loki itself requires, so the
# packages both use compile once. Output goes to a cache directory keyed by the pins,
# so a second run builds nothing:
#   ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}/loki-bin-<loki version>-<key>/
# tests/harness/loki.py computes the same key (keep the file list in sync).
# Uses only the machine's Go (GOTOOLCHAIN=local) and its configured module proxy.
# Env: FLEETMEDIC_BUILD_JOBS (go build -p, default 2), FLEETMEDIC_LOKI_SKIP=1 to skip.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$ROOT/tests/loki"
log() { printf '[32-loki] %s\n' "$*" >&2; }

[[ ${FLEETMEDIC_LOKI_SKIP:-} == 1 ]] && { log "skipped (FLEETMEDIC_LOKI_SKIP=1)"; exit 0; }
command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go not found (need Go >= $(sed -n 's/^go //p' "$src/go.mod"))"; exit 1; }

# The key: sha256 over the files that define the build (same list as the harness).
files=(go.mod go.sum build.flags)
key="$(cd "$src" && sha256sum "${files[@]}" | sha256sum | cut -c1-12)"
pinned() { sed -n "s#^[[:space:]]*$1 \(v[^ ]*\).*#\1#p" "$src/go.mod" | head -n1; }
loki="$(pinned github.com/grafana/loki/v3)"
cache="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
out="$cache/loki-bin-$loki-$key"
built() { [[ -x $out/loki && -x $out/promtool && -f $out/VERSIONS ]]; }
versions() { tr '\n' ' ' < "$out/VERSIONS" | sed 's/ $//'; }

if built; then log "cached: $out ($(versions))"; exit 0; fi
mkdir -p "$cache"
exec 9>"$out.lock"
flock 9  # another setup may be building the same thing right now
if built; then log "cached: $out ($(versions))"; exit 0; fi

blog="$out.build.log"
log "building loki $loki and promtool into $out (cold: ~1250 CPU-s, ~11 min on 2 idle cores, 2.3 GB peak; log: $blog)"
start=$SECONDS
tmp="$out.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
jobs="${FLEETMEDIC_BUILD_JOBS:-2}"
# shellcheck source=../../tests/loki/build.flags
source "$src/build.flags"
build() {
  cd "$src"
  prom="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
  # `go list -m` names the module's directory only once it is in the module cache: on a
  # fresh machine (nothing downloaded yet) .Dir is empty, so download it first
  go mod download github.com/prometheus/prometheus
  promdir="$(go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)"
  [[ -f $promdir/VERSION ]] || { echo "no VERSION in the prometheus module ($promdir)"; return 1; }
  # Prometheus' own release number (its VERSION file); the module version says which
  # commit: v0.312.1-0.<date>-<rev> is a commit after 3.12.0.
  promver="$(cat "$promdir/VERSION")"
  rev="${prom##*-}"
  lb=github.com/grafana/loki/v3/pkg/util/build
  pv=github.com/prometheus/common/version
  t=$SECONDS
  set -x
  nice -n 10 go build -p "$jobs" -trimpath -o "$tmp/loki" \
    -ldflags "-s -w -X $lb.Version=${loki#v} -X $lb.Revision=$loki -X $lb.Branch=module -X $lb.BuildUser=fleetmedic-setup -X $lb.BuildDate=1970-01-01T00:00:00Z" \
    github.com/grafana/loki/v3/cmd/loki
  { set +x; } 2>/dev/null
  echo "loki: $((SECONDS - t)) s"
  t=$SECONDS
  set -x
  nice -n 10 go build -p "$jobs" -trimpath -o "$tmp/promtool" -tags "$PROMTOOL_TAGS" \
    -ldflags "-s -w -X $pv.Version=$promver -X $pv.Revision=$rev -X $pv.Branch=module -X $pv.BuildUser=fleetmedic-setup -X $pv.BuildDate=19700101-00:00:00" \
    github.com/prometheus/prometheus/cmd/promtool
  { set +x; } 2>/dev/null
  echo "promtool: $((SECONDS - t)) s"
  {
    echo "loki $("$tmp/loki" -version 2>&1 | sed -n 's/^loki, version \([^ ]*\).*/\1/p')"
    echo "promtool $("$tmp/promtool" --version 2>&1 | sed -n 's/^promtool, version \([^ ]*\).*/\1/p') ($prom)"
    echo "go $(go env GOVERSION)"
  } > "$tmp/VERSIONS"
  grep -q '^loki [0-9]' "$tmp/VERSIONS" && grep -q '^promtool [0-9]' "$tmp/VERSIONS"
}
set +e; (set -e; build) > "$blog" 2>&1; rc=$?; set -e
if ((rc)); then
  log "build FAILED after $((SECONDS - start))s; last lines of $blog:"
  tail -n 15 "$blog" >&2
  exit 1
fi
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
log "built in $((SECONDS - start))s: $out ($(versions))"
