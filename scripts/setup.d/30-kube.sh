#!/usr/bin/env bash
# Build the test Kubernetes binaries from the Go modules pinned in tests/kube, into
# cache directories keyed by the content of the pins, so a second run builds nothing:
#   ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}/kube-bin-<kubernetes version>-<key>/
#       kube-apiserver, an embedded etcd, kwok (every kube test)
#   ${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}/kubelet-bin-<kubernetes version>-<key>/
#       kubelet, kube-controller-manager, kube-scheduler and the pause binary (the
#       kubelet test node, tests/harness/kubelet.py); same module, so the packages
#       they share with kube-apiserver compile once
# tests/harness/kube.py computes the same key (keep the file list in sync).
# Uses only the machine's Go (GOTOOLCHAIN=local) and its configured module proxy.
# Env: FLEETMEDIC_BUILD_JOBS (go build -p, default 2), FLEETMEDIC_KUBE_SKIP=1 to skip
# everything, FLEETMEDIC_KUBELET_SKIP=1 to skip the kubelet node's binaries.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$ROOT/tests/kube"
log() { printf '[30-kube] %s\n' "$*" >&2; }

[[ ${FLEETMEDIC_KUBE_SKIP:-} == 1 ]] && { log "skipped (FLEETMEDIC_KUBE_SKIP=1)"; exit 0; }
command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go not found (need Go >= $(sed -n 's/^go //p' "$src/go.mod"))"; exit 1; }

# The key: sha256 over the files that define the build (same list as the harness).
stages_ours=(kwok/stages/pod-delete-at-grace-end.yaml)  # our kwok stages (see build)
files=(go.mod go.sum cmd/etcd/main.go cmd/etcd/version.go kwok/go.mod kwok/go.sum "${stages_ours[@]}")
key="$(cd "$src" && sha256sum "${files[@]}" | sha256sum | cut -c1-12)"
kube="$(sed -n 's#^[[:space:]]*k8s.io/kubernetes \(v[^ ]*\).*#\1#p' "$src/go.mod")"
kwokv="$(sed -n 's#^[[:space:]]*sigs.k8s.io/kwok \(v[^ ]*\).*#\1#p' "$src/kwok/go.mod")"
cache="${FLEETMEDIC_CACHE_DIR:-/var/cache/fleetmedic}"
out="$cache/kube-bin-$kube-$key"
built() { [[ -x $out/kube-apiserver && -x $out/etcd && -x $out/kwok && -f $out/kwok-stages.yaml && -f $out/VERSIONS ]]; }
versions() { tr '\n' ' ' < "$out/VERSIONS" | sed 's/ $//'; }

export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
jobs="${FLEETMEDIC_BUILD_JOBS:-2}"
minor="${kube#v1.}"; minor="${minor%%.*}"
cb=k8s.io/component-base/version
ldk="-s -w -X $cb.gitVersion=$kube -X $cb.gitMajor=1 -X $cb.gitMinor=$minor -X $cb.gitTreeState=clean -X $cb.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$cache"

# run_build DIR WHAT FUNCTION: FUNCTION builds into $tmp; DIR appears whole or not at all.
run_build() {
  local dir=$1 what=$2 fn=$3 blog="$1.build.log" start=$SECONDS rc
  log "building $what into $dir (log: $blog)"
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  set +e; (set -e; "$fn") > "$blog" 2>&1; rc=$?; set -e
  if ((rc)); then
    log "build FAILED after $((SECONDS - start))s; last lines of $blog:"
    tail -n 15 "$blog" >&2
    exit 1
  fi
  rm -rf "$dir"; mv "$tmp" "$dir"; trap - EXIT
  log "built in $((SECONDS - start))s: $dir ($(tr '\n' ' ' < "$dir/VERSIONS" | sed 's/ $//'))"
}

build_kube() {
  set -x
  (cd "$src" && nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldk" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  (cd "$src" && nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd)
  (cd "$src/kwok" && nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
  # kwok (the controller) has no built-in stages; take the "fast" node/pod stages
  # from the pinned kwok module (kwokctl embeds the same files), and add ours
  # (tests/kube/kwok/stages: a pod that takes its grace period to terminate).
  stages="$(cd "$src/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    printf -- '---\n'; cat "$stages/$f"
  done > "$tmp/kwok-stages.yaml"
  for f in "${stages_ours[@]}"; do printf -- '---\n'; cat "$src/$f"; done >> "$tmp/kwok-stages.yaml"
  cat "$stages/node/heartbeat/node-heartbeat.yaml" > "$tmp/kwok-stage-heartbeat.yaml"
  {
    echo "kube-apiserver $("$tmp/kube-apiserver" --version 2>&1 | awk '{print $2}')"
    "$tmp/etcd" --version 2>&1
    echo "kwok $kwokv"
    echo "go $(go env GOVERSION)"
  } > "$tmp/VERSIONS"
}

build_kubelet() {
  set -x
  local c
  for c in kubelet kube-controller-manager kube-scheduler; do
    (cd "$src" && nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldk" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c")
  done
  # The sandbox ("pause") container's binary, from the same kubernetes module; a static
  # C program (tests/harness/image.py wraps it in an OCI image for containerd).
  kdir="$(cd "$src" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  gcc -Os -Wall -static -DVERSION="$kube" -o "$tmp/pause" "$kdir/build/pause/linux/pause.c"
  strip "$tmp/pause"
  {
    for c in kubelet kube-controller-manager kube-scheduler; do
      echo "$c $("$tmp/$c" --version 2>&1 | awk '{print $2}')"
    done
    echo "pause $kube"
    echo "go $(go env GOVERSION)"
  } > "$tmp/VERSIONS"
}

if built; then
  log "cached: $out ($(versions))"
else
  exec 9>"$out.lock"
  flock 9  # another setup may be building the same thing right now
  if built; then log "cached: $out ($(versions))"; else
    run_build "$out" "kube-apiserver $kube, etcd, kwok $kwokv (cold: ~7 min on 2 cores)" build_kube
  fi
  exec 9>&-
fi

[[ ${FLEETMEDIC_KUBELET_SKIP:-} == 1 ]] && { log "kubelet node binaries skipped (FLEETMEDIC_KUBELET_SKIP=1)"; exit 0; }
kout="$cache/kubelet-bin-$kube-$key"
kbuilt() { [[ -x $kout/kubelet && -x $kout/kube-controller-manager && -x $kout/kube-scheduler && -x $kout/pause && -f $kout/VERSIONS ]]; }
if kbuilt; then log "cached: $kout"; exit 0; fi
exec 9>"$kout.lock"
flock 9
if kbuilt; then log "cached: $kout"; exit 0; fi
run_build "$kout" "kubelet, kube-controller-manager, kube-scheduler $kube and pause (cold: ~6 min after kube-apiserver)" build_kubelet
