#!/usr/bin/env bash
# Build the test Receptor (github.com/ansible/receptor/cmd/receptor-cl, installed as
# `receptor`) from the Go module pinned in tests/receptor. Output goes to a cache
# directory keyed by the pins, so a second run builds nothing:
#   ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}/receptor-bin-<version>-<key>/
# tests/harness/mesh.py computes the same key (keep the file list in sync).
# receptorctl and ansible-runner (for `ansible-runner worker` on execution nodes) come
# from pip (pyproject.toml). Uses only the machine's Go (GOTOOLCHAIN=local).
# Two builds: stock (what operators run; the tests' default) and patched, with
# tests/receptor/patches/*.patch applied (patch -p1, in name order) to a copy of the
# pinned module and built through a `replace`: fixes Receptor has not released (each
# patch says why), for benches and tests that compare (tests/harness/mesh.py
# find_binaries(patched=True)). FLEETMEDIC_RECEPTOR_PATCHED=1 builds only the patched one.
# Env: FLEETMEDIC_BUILD_JOBS (go build -p, default 2), FLEETMEDIC_RECEPTOR_SKIP=1 to skip.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$ROOT/tests/receptor"
log() { printf '[34-receptor] %s\n' "$*" >&2; }

[[ ${FLEETMEDIC_RECEPTOR_SKIP:-} == 1 ]] && { log "skipped (FLEETMEDIC_RECEPTOR_SKIP=1)"; exit 0; }
command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go not found (need Go >= $(sed -n 's/^go //p' "$src/go.mod"))"; exit 1; }

# The key: sha256 over the files that define the build (same list as the harness).
patched="${FLEETMEDIC_RECEPTOR_PATCHED:-0}"
if [[ $patched != 1 ]] && compgen -G "$src/patches/*.patch" >/dev/null; then
  FLEETMEDIC_RECEPTOR_PATCHED=1 bash "${BASH_SOURCE[0]}"
fi
files=(go.mod go.sum)
if [[ $patched == 1 ]]; then
  for p in "$src"/patches/*.patch; do [[ -e $p ]] && files+=("patches/${p##*/}"); done
fi
key="$(cd "$src" && sha256sum "${files[@]}" | sha256sum | cut -c1-12)"
receptor="$(sed -n 's#^[[:space:]]*\(require \)\{0,1\}github.com/ansible/receptor \(v[^ ]*\).*#\2#p' "$src/go.mod" | head -n1)"
cache="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
out="$cache/receptor-bin-$receptor-$key"
built() { [[ -x $out/receptor && -f $out/VERSIONS ]]; }
versions() { tr '\n' ' ' < "$out/VERSIONS" | sed 's/ $//'; }

if built; then log "cached: $out ($(versions))"; exit 0; fi
mkdir -p "$cache"
exec 9>"$out.lock"
flock 9  # another setup may be building the same thing right now
if built; then log "cached: $out ($(versions))"; exit 0; fi

blog="$out.build.log"
log "building receptor $receptor into $out (cold: ~285 CPU-s, ~3 min on 2 idle cores; log: $blog)"
start=$SECONDS
tmp="$out.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
jobs="${FLEETMEDIC_BUILD_JOBS:-2}"
build() {
  if [[ $patched != 1 ]]; then cd "$src"; go_build; return; fi
  # the pinned module, patched, in a copy of our module that replaces it
  mod="$(cd "$src" && go mod download -json "github.com/ansible/receptor@$receptor" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d $mod ]] || { echo "no module dir for github.com/ansible/receptor@$receptor" >&2; return 1; }
  cp -r "$mod" "$tmp/receptor-src"; chmod -R u+w "$tmp/receptor-src"
  cp "$src/go.mod" "$src/go.sum" "$tmp/"
  for f in "${files[@]}"; do
    [[ $f == patches/* ]] || continue
    patch -p1 -d "$tmp/receptor-src" < "$src/$f"
    echo "patch ${f#patches/}" >> "$tmp/PATCHES"
  done
  echo "replace github.com/ansible/receptor => ./receptor-src" >> "$tmp/go.mod"
  cd "$tmp"
  go_build
  rm -rf "$tmp/receptor-src" "$tmp/go.mod" "$tmp/go.sum" "$tmp/PATCHES"
}
go_build() {
  set -x
  nice -n 10 go build -p "$jobs" -trimpath -o "$tmp/receptor" \
    -ldflags "-s -w -X github.com/ansible/receptor/internal/version.Version=${receptor#v}" \
    github.com/ansible/receptor/cmd/receptor-cl
  { set +x; } 2>/dev/null
  {
    echo "receptor $("$tmp/receptor" --version 2>&1 | head -n1)"
    echo "go $(go env GOVERSION)"
    cat "$tmp/PATCHES" 2>/dev/null || true
  } > "$tmp/VERSIONS.new"
  grep -q "^receptor ${receptor#v}\$" "$tmp/VERSIONS.new"
  mv "$tmp/VERSIONS.new" "$tmp/VERSIONS"
}
set +e; (set -e; build) > "$blog" 2>&1; rc=$?; set -e
if ((rc)); then
  log "build FAILED after $((SECONDS - start))s; last lines of $blog:"
  tail -n 15 "$blog" >&2
  exit 1
fi
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
log "built in $((SECONDS - start))s: $out ($(versions))"
