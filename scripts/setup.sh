#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine (root): apt packages, the
# virtualenv at .venv with fleetmedic installed, then the component steps in
# scripts/setup.d/*.sh (Go-built test servers, the nspawn node tree, fakes).
# A second run installs and builds nothing.
#
#   setup.sh          everything (what `make setup` and `make test` run)
#   setup.sh demo     only what `make demo` uses (the table NEEDED_BY below)
#   setup.sh test     everything, as with no argument
#
# What each command builds, and about how long it takes (cold figures: the per-step wall
# times of a cold `make setup` on 2 CPUs shared with other work, 2026-11-26; a quiet
# machine is faster, mostly in the Go builds):
#   make demo   apt (base, nspawn), .venv with fleetmedic[demo], the node tree (debootstrap,
#               3.5 min, in the background), kube-apiserver + etcd + kwok (Go: 23 min
#               here under load, 1,115 CPU-s with the kubelet's below), the fake GPU
#               tools; then the demo itself (70 s). Not Loki, Receptor, the kubelet node,
#               the agent image nor ansible-test's virtualenvs. Warm: 35 s, then the demo.
#   make test   all of it: the demo's parts plus the kubelet node's binaries (3 min),
#               Loki and promtool (8 min, 782 CPU-s), Receptor stock and patched (79 s), the
#               agent's OCI image and ansible-test's virtualenvs (3-4 min each, in the
#               background), the Debian 13 and 14 trees for Slurm 24.11 and 26.05 (one
#               after the other in the background: 6 min for both), with fleetmedic[test]:
#               28.7 min cold on a fresh, quiet machine (2026-11-29: kube 17 min, 1,299
#               CPU-s; the whole `.ci/run` 89.8 min); then the stages.
# Both reuse the content-keyed caches in /var/cache/fleetmedic: with them built, a fresh
# checkout's setup is the pip install (about 3 min), a second run about a second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${1:-test}"
case $TARGET in
  demo | test) ;;
  *) echo "usage: setup.sh [demo|test] (no argument: test, everything)" >&2; exit 2 ;;
esac
log() { printf '[setup] %s\n' "$*" >&2; }
TIMES="$ROOT/build/setup-times.tsv"   # part <TAB> wall s <TAB> ok|FAILED <TAB> CPU s
LOGS="$ROOT/build/setup-logs"         # background steps' logs, CPU times of steps
rm -rf "$LOGS"; mkdir -p "$LOGS"; : > "$TIMES"
setup_t0=$SECONDS
# (set -e does not act inside CMD when CMD is a function: functions return on failure themselves)
timed() {  # timed NAME CMD...: run CMD, add its wall time to $TIMES
  local name=$1 t0=$SECONDS rc=0; shift
  "$@" || rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$( ((rc)) && echo FAILED || echo ok)" \
    "$(cat "$LOGS/$name.cpu" 2>/dev/null)" >> "$TIMES"
  return "$rc"
}
# run_step STEP: bash STEP, then its CPU seconds (its processes' user + sys: the second
# line of an inner shell's `times`, not in a pipe) into $LOGS/<step>.cpu
run_step() {
  local rc=0 f="$LOGS/${1#scripts/setup.d/}.cpu"
  # shellcheck disable=SC2016  # expanded by the inner bash
  bash -c 'bash "$1"; rc=$?; times > "$2"; exit "$rc"' _ "$1" "$f.raw" || rc=$?
  awk 'NR == 2 { t = 0; for (i = 1; i <= NF; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%.1f", t }' \
    "$f.raw" > "$f" 2>/dev/null || true
  return "$rc"
}
table() {
  awk -F'\t' '{printf "[setup] %-28s %5d s wall  %6s  %s\n", $1, $2, ($4 == "" ? "" : $4 " CPU-s"), $3}' "$TIMES" >&2
}

# Which commands need each step (every file in scripts/setup.d must be listed: a new
# step says who needs it). A table here, not a mark in the step: 20-nodetree.sh and
# 40-fakes.sh hash their own text into their cache keys.
declare -A NEEDED_BY=(
  [00-base.apt]="demo test"
  [20-nodetree.apt]="demo test"  [20-nodetree.sh]="demo test"  # the nspawn nodes
  [22-nodetree-slurm.sh]="test"                                # slurmd in the Slurm fleet's nodes
  [24-nodetree-debian.sh]="test"                               # Slurm 24.11, 26.05: Debian trees
  [30-kube.apt]="demo test"      [30-kube.sh]="demo test"      # demo: no kubelet node (below)
  [32-loki.sh]="test"
  [34-receptor.apt]="test"       [34-receptor.sh]="test"
  [35-kubelet.apt]="test"
  [36-slurm.apt]="test"                                        # the Slurm test cluster
  [40-fakes.apt]="test"          [40-fakes.sh]="demo test"     # .apt: iperf3, ipmitool
  [50-image.apt]="test"          [50-image.sh]="test"
  [60-sanity.apt]="test"         [60-sanity.sh]="test"
)
unlisted=()
for f in scripts/setup.d/*; do
  [[ -n ${NEEDED_BY[${f#scripts/setup.d/}]:-} ]] || unlisted+=("${f#scripts/setup.d/}")
done
if ((${#unlisted[@]})); then
  log "not in setup.sh's NEEDED_BY table: ${unlisted[*]} (say which commands need it)"
  exit 2
fi
needed() { [[ " ${NEEDED_BY[${1#scripts/setup.d/}]} " == *" $TARGET "* ]]; }

# CI builds everything: the FLEETMEDIC_*_SKIP switches (skip a build, then its tests) are
# refused there, as scripts/test.sh and tests/conftest.py refuse them.
if [[ ${CI:-} == true ]]; then
  switches="$(env | sed -n 's/^\(FLEETMEDIC_[A-Z0-9_]*_SKIP\)=.\+$/\1/p' | tr '\n' ' ')"
  [[ -z $switches ]] || { log "refused under CI=true: ${switches% } (CI runs every test)"; exit 2; }
  # nor a build that replaces the stock one (tests/harness/procs.py REPLACING_SWITCHES)
  [[ ${FLEETMEDIC_RECEPTOR_PATCHED:-0} == 0 ]] || { log "refused under CI=true: FLEETMEDIC_RECEPTOR_PATCHED (CI builds and tests the stock Receptor too)"; exit 2; }
fi
# The demo runs the API server alone: 30-kube.sh leaves out the kubelet node's binaries.
EXTRA="test"
if [[ $TARGET == demo ]]; then
  export FLEETMEDIC_KUBELET_SKIP=1
  EXTRA="demo"
fi

# --- apt: each component lists what it needs in scripts/setup.d/*.apt
apt_lists=()
for f in scripts/setup.d/*.apt; do needed "$f" && apt_lists+=("$f"); done
mapfile -t want < <(cat "${apt_lists[@]}" | sed 's/#.*//' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
apt_install() {
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || return
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
((${#missing[@]} == 0)) || timed apt apt_install

# --- virtualenv with fleetmedic and its test extras
PY="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
# The stamp says which extra was installed for which pyproject.toml; test includes demo.
stamp=.venv/.fleetmedic-installed
key="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
pip_install() {
  log "pip: installing fleetmedic[$EXTRA] into .venv"
  # constraints.txt pins every version (no resolver backtracking); the registry's downloads
  # get interrupted at times, so pip resumes and retries, and the whole install runs twice.
  # (--resume-retries needs pip >= 25.1, so only after the upgrade)
  .venv/bin/pip install -q --retries 10 --timeout 60 --upgrade pip >/dev/null || return
  local opts=(-q --retries 10 --resume-retries 10 --timeout 60)
  .venv/bin/pip install "${opts[@]}" -c constraints.txt -e ".[$EXTRA]" \
    || .venv/bin/pip install "${opts[@]}" -c constraints.txt -e ".[$EXTRA]" || return
  echo "$key $EXTRA" > "$stamp"
}
have="$(cat "$stamp" 2>/dev/null || true)"
[[ $have == "$key $EXTRA" || $have == "$key test" ]] || timed pip pip_install
# The virtualenv is ready: scripts/test.sh starts the static checks and the unit tests now,
# beside the component steps (the Go builds), when it names a file here.
[[ -z ${FLEETMEDIC_SETUP_VENV_READY:-} ]] || : > "$FLEETMEDIC_SETUP_VENV_READY"

# --- component steps (each is idempotent and caches by version)
export PATH="$ROOT/.venv/bin:$PATH"
# The steps in BACKGROUND mostly wait on the network or the disk (debootstrap, mmdebstrap,
# pip): they start first and run while the CPU-bound steps (Go builds) run one after
# another in the foreground. (A list here, not a mark in the step: 20-nodetree.sh hashes
# its own text into its cache key.) A background step's output goes to
# build/setup-logs/<step>.log, shown whole if it fails; one line when it finishes. setup
# fails when any step fails, after every started step has finished.
BACKGROUND=(20-nodetree.sh 22-nodetree-slurm.sh 24-nodetree-debian.sh 50-image.sh 60-sanity.sh)
is_bg() { [[ " ${BACKGROUND[*]} " == *" ${1#scripts/setup.d/} "* ]]; }
bg_pids=() bg_steps=()
bg_run() {  # the background wrapper: one line on stderr when done, the whole log on failure
  local step=$1 name=${1#scripts/setup.d/} rc=0
  timed "$name" run_step "$step" > "$LOGS/$name.log" 2>&1 || rc=$?
  if ((rc)); then
    log "step $name (background) FAILED (exit $rc); its log, $LOGS/$name.log:"
    sed 's/^/    /' "$LOGS/$name.log" >&2
  else
    log "step $name (background): done ($(awk -F'\t' -v n="$name" '$1 == n {print $2}' "$TIMES") s)"
  fi
  return "$rc"
}
for step in scripts/setup.d/*.sh; do
  if [[ ! -e $step ]] || ! is_bg "$step" || ! needed "$step"; then continue; fi
  log "step: ${step#scripts/setup.d/} (background; log: $LOGS/${step#scripts/setup.d/}.log)"
  bg_run "$step" &
  bg_pids+=("$!") bg_steps+=("${step#scripts/setup.d/}")
done
fg_failed=""
for step in scripts/setup.d/*.sh; do
  [[ -e $step ]] || continue
  is_bg "$step" && continue
  needed "$step" || continue
  log "step: ${step#scripts/setup.d/}"
  timed "${step#scripts/setup.d/}" run_step "$step" || { fg_failed=${step#scripts/setup.d/}; break; }
done
bg_failed=()
for i in "${!bg_pids[@]}"; do
  wait "${bg_pids[$i]}" || bg_failed+=("${bg_steps[$i]}")
done
printf '%s\t%s\t%s\n' "(setup wall time)" "$((SECONDS - setup_t0))" "" >> "$TIMES"
table
if [[ -n $fg_failed ]] || ((${#bg_failed[@]})); then
  log "FAILED: ${fg_failed:+$fg_failed }${bg_failed[*]}"
  exit 1
fi
log "ready ($TARGET)"
