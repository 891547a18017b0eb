#!/usr/bin/env bash
# The whole test suite, setup included: what `make test` and CI (.ci/run) run.
# Every stage runs even when an earlier one failed; the exit status says whether all
# passed, and the last lines list the stages that failed.
# A run cannot pass by not testing: pytest skips must be on tests/allowed-skips.txt and
# every test the suite holds must run (scripts/check_pytest_run.py); under CI=true the
# FLEETMEDIC_*_SKIP switches, the switches that replace a real part (a developer's own
# build of a test server, the patched Receptor) and extra pytest arguments are refused.
# Extra arguments go to pytest instead of the two pytest lanes (a subset: then the count
# check is left out).
#
# Lanes, so that what waits overlaps what computes:
#   setup        scripts/setup.sh (apt, the virtualenv, then the component steps: Go builds,
#                node trees; a few seconds when its caches are warm)
#   checks       once the virtualenv is ready, beside the rest of setup: the static checks,
#                then the unit tests (pytest tests/unit); at the lowest CPU priority, so the
#                Go builds (cold) and the integration tests' deadlines (warm) go first
#   integration  once setup is done: pytest tests/integration, in this terminal
#   benches      beside it: every bench/<name>.py --smoke
#   molecule     beside it: every Molecule scenario
# A background lane prints one line as each of its stages ends and its whole log at the
# end. The table at the end gives each stage's wall and CPU seconds and each lane's span.
# FLEETMEDIC_SERIAL_LANES=1 runs the lanes one after another (to measure or to debug).
# FLEETMEDIC_NICE_LANES=0 keeps every lane at this shell's priority (tests/unit/scripts/
# test_lanes.py runs this script on stand-ins: on a busy desk a lane at nice 19 crawls).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"

if [[ ${CI:-} == true ]]; then
  mapfile -t switches < <(env | sed -n 's/^\(FLEETMEDIC_[A-Z0-9_]*_SKIP\)=.\+$/\1/p')
  if ((${#switches[@]})); then
    echo "refused under CI=true: ${switches[*]} (CI runs every test; unset them)" >&2
    exit 2
  fi
  # the switches that replace a real part (tests/harness/procs.py REPLACING_SWITCHES)
  replacing="$(python3 -c 'import sys; sys.path.insert(0, "."); from tests.harness import procs; print(" ".join(procs.replacing_switches()))')"
  if [[ -n $replacing ]]; then
    echo "refused under CI=true: $replacing (they replace a real part the suite tests against; unset them)" >&2
    exit 2
  fi
  if (($#)); then
    echo "refused under CI=true: pytest arguments ($*): CI runs the whole suite" >&2
    exit 2
  fi
fi

# What the run had to work with (CI's machines differ; the timings below depend on it).
echo "== machine: $(nproc) CPUs, $(awk '/^MemTotal:/ {printf "%.1f GB", $2 / 1048576}' /proc/meminfo) RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"

BUILD="$ROOT/build"
REPORTS="$BUILD/test-reports"
LANES="$BUILD/lanes"
rm -rf "$LANES" "$REPORTS"; mkdir -p "$LANES" "$REPORTS"
exec 3>&1  # this terminal: a background lane's one line per stage goes here
T0=$SECONDS
LANE=""
failed=()
times=()  # "LANE<TAB>NAME<TAB>wall s<TAB>ok|FAILED<TAB>CPU s" per stage, for the table

cpu_now() {  # CPU seconds (user + sys) of this shell's finished children so far, in $cpu
  # (`times` here, not in a pipe or $(...): a forked shell counts from zero)
  local f="$LANES/.times.$BASHPID"
  times > "$f"
  cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= NF; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%.0f", t }' "$f")
  rm -f "$f"
}
stage() {  # stage NAME CMD...
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS c0 cpu st=ok
  cpu_now; c0=$cpu
  if ! "$@"; then failed+=("$name"); st=FAILED; fi
  cpu_now
  local wall=$((SECONDS - t0))
  cpu=$((cpu - c0))
  echo "== $name: $st ($wall s)"
  [[ -z $LANE ]] || echo "== [$LANE] $name: $st ($wall s)" >&3
  times+=("${LANE:-main}"$'\t'"$name"$'\t'"$wall"$'\t'"$st"$'\t'"$cpu")
}
# A lane: FUNCTION's stages in a background subshell (at nice NICE), its output, stage times
# and failures to files, its span (start and end, seconds into the run) too.
# shellcheck disable=SC2030,SC2031  # a lane's arrays are its subshell's; collect_lane reads them back
lane() {  # lane NAME NICE FUNCTION
  local name=$1 niceness=$2 fn=$3
  (
    LANE=$name failed=() times=()
    [[ ${FLEETMEDIC_NICE_LANES:-1} == 0 ]] || renice -n "$niceness" -p "$BASHPID" >/dev/null
    echo "$((SECONDS - T0))" > "$LANES/$name.span"
    "$fn"
    echo "$((SECONDS - T0))" >> "$LANES/$name.span"
    printf '%s\n' "${times[@]}" > "$LANES/$name.times"
    printf '%s\n' "${failed[@]}" > "$LANES/$name.failed"
  ) > "$LANES/$name.log" 2>&1
}
# shellcheck disable=SC2031  # the arrays a lane filled in its subshell come back through files
collect_lane() {  # a finished lane: its log, stage times and failures into this shell's
  local name=$1 line
  echo "== lane $name: its log"
  cat "$LANES/$name.log"
  while IFS= read -r line; do [[ -n $line ]] && times+=("$line"); done < "$LANES/$name.times"
  while IFS= read -r line; do [[ -n $line ]] && failed+=("$line"); done < "$LANES/$name.failed"
}
span() {  # the main shell's own lanes (setup, integration): their span, as lane() writes it
  printf '%s\n' "$2" "$3" > "$LANES/$1.span"
}

# --- pytest: a lane's tests, with a JUnit report and the seconds of each test recorded
#     (scripts/timings.py refresh, `make timings`, folds them into tests/timings.json)
pytest_lane() {  # pytest_lane NAME PATH|ARGS...
  local name=$1 workers par=(); shift
  workers="$(python scripts/pytest_workers.py --lane "$name")" || return 1
  ((workers > 1)) && par=(-n "$workers" --dist loadscope)
  echo "pytest ($name): $workers worker(s)${FLEETMEDIC_PYTEST_WORKERS:+ (FLEETMEDIC_PYTEST_WORKERS)}"
  local whole=()
  [[ $name == subset ]] || whole=(--whole-suite)
  # --durations: the slowest tests (and fixtures' setup) in the log, to see where time goes
  pytest --junitxml="$REPORTS/pytest-$name.xml" --record-timings="$REPORTS/durations-$name.json" \
    "${whole[@]}" --durations=30 --durations-min=1 "${par[@]}" "$@"
}
# The count check over both lanes: nothing skipped off the allow-list, every test of the
# suite in a report (what pytest collects, without PYTEST_ADDOPTS: a deselection there
# must not hide).
pytest_count() {
  local n reports=()
  n="$(env -u PYTEST_ADDOPTS pytest --collect-only -q -p no:cacheprovider 2>/dev/null \
       | sed -n 's/^\([0-9]\+\) tests\? collected.*/\1/p' | tail -1)"
  [[ -n $n ]] || { echo "pytest --collect-only found no tests"; return 1; }
  for r in "$REPORTS"/pytest-unit.xml "$REPORTS"/pytest-integration.xml; do
    [[ -f $r ]] && reports+=("$r")
  done
  ((${#reports[@]})) || { echo "no pytest report"; return 1; }
  python scripts/check_pytest_run.py "${reports[@]}" --expect "$n"
}
pytest_subset() {  # extra arguments: one pytest run of them, its skips checked
  pytest_lane subset "$@" || { [[ -f $REPORTS/pytest-subset.xml ]] && python scripts/check_pytest_run.py "$REPORTS/pytest-subset.xml"; return 1; }
  python scripts/check_pytest_run.py "$REPORTS/pytest-subset.xml"
}

pytest_main() {
  if ((${#PYTEST_ARGS[@]})); then
    pytest_subset "${PYTEST_ARGS[@]}"
  else
    pytest_lane integration tests/integration
  fi
}

# --- the lanes' stages
checks() {
  stage "import layering (import-linter)" lint-imports --no-cache
  stage "ruff lint (package, tests, bench, scripts, deploy)" ruff check controller tests bench scripts deploy
  stage "ruff format (whole tree)" ruff format --check --quiet .
  stage "mypy (package)" mypy
  if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
    stage "ansible-lint (production profile)" ansible-lint --offline --profile production
  fi
  stage "collection build" ansible-galaxy collection build --force --output-path "$(mktemp -d)"
  if ((!${#PYTEST_ARGS[@]})); then
    stage "pytest unit (tests/unit)" pytest_lane unit tests/unit
  fi
  # ansible-test's own virtualenvs come from setup (60-sanity.sh, a background step)
  wait_for_setup
  ((setup_rc == 0)) && stage "ansible-test sanity (collection as built)" bash scripts/sanity.sh
}
# Every bench/<name>.py (bench/_*.py are shared code) once with --smoke: tiny sizes, one
# trial, so a broken bench fails the run (bench/README.md).
benches() {
  local bench
  for bench in bench/[!_]*.py; do
    stage "bench smoke $(basename "$bench" .py)" python "$bench" --smoke
  done
}
molecule_scenarios() {
  local scenario name
  for scenario in tests/molecule/*/molecule.yml; do
    [[ -e $scenario ]] || continue
    name="$(basename "$(dirname "$scenario")")"
    [[ $name == default ]] && continue  # an empty stub (see its molecule.yml)
    stage "molecule $name" env MOLECULE_GLOB='tests/molecule/*/molecule.yml' molecule test -s "$name"
  done
}

# --- setup, in the background: the checks lane starts once the virtualenv is ready
SETUP_DONE="$LANES/setup.rc"
wait_for_setup() {  # (in any lane) until setup has ended; its exit status in $setup_rc
  while [[ ! -s $SETUP_DONE ]]; do sleep 1; done
  setup_rc=$(cat "$SETUP_DONE")
}
PYTEST_ARGS=("$@")
PYTEST_STAGE="pytest integration (tests/integration)"
(($#)) && PYTEST_STAGE="pytest $*"
venv_ready="$LANES/setup.venv-ready"
setup_t0=$((SECONDS - T0))
echo "== setup (scripts/setup.sh; its lines are [setup])"
( rc=0; FLEETMEDIC_SETUP_VENV_READY="$venv_ready" bash scripts/setup.sh test || rc=$?
  echo "$rc" > "$SETUP_DONE.tmp" && mv "$SETUP_DONE.tmp" "$SETUP_DONE" ) &
setup_pid=$!
while [[ ! -e $venv_ready && ! -s $SETUP_DONE ]]; do sleep 1; done
serial=${FLEETMEDIC_SERIAL_LANES:-0}
if [[ -e $venv_ready ]]; then
  if [[ $serial == 1 ]]; then
    wait "$setup_pid"; wait_for_setup
    lane checks 10 checks
  else
    lane checks 19 checks & checks_pid=$!
  fi
fi
wait "$setup_pid"
wait_for_setup
span setup "$setup_t0" "$((SECONDS - T0))"
setup_st=ok
((setup_rc == 0)) || { setup_st=FAILED; failed+=("setup"); }
times+=("main"$'\t'"setup (scripts/setup.sh; its parts above)"$'\t'"$((SECONDS - T0 - setup_t0))"$'\t'"$setup_st"$'\t')

if ((setup_rc == 0)); then
  echo "== setup done; the integration tests here, the bench smokes and Molecule scenarios beside them"
  if [[ $serial == 1 ]]; then
    t=$((SECONDS - T0)); stage "$PYTEST_STAGE" pytest_main; span integration "$t" "$((SECONDS - T0))"
    lane benches 0 benches
    lane molecule 0 molecule_scenarios
  else
    lane benches 0 benches & benches_pid=$!
    lane molecule 0 molecule_scenarios & molecule_pid=$!
  fi
fi
if ((setup_rc == 0)) && [[ $serial != 1 ]]; then
  t=$((SECONDS - T0))
  stage "$PYTEST_STAGE" pytest_main
  span integration "$t" "$((SECONDS - T0))"
  wait "$benches_pid" "$molecule_pid"
fi
[[ -z ${checks_pid:-} ]] || wait "$checks_pid"
for l in checks benches molecule; do [[ -f $LANES/$l.times ]] && collect_lane "$l"; done
if ((!${#PYTEST_ARGS[@]})) && ((setup_rc == 0)); then
  stage "pytest: every test of the suite ran, no skip off the allow-list" pytest_count
fi
WALL=$((SECONDS - T0))

# Where the time went: setup's parts (scripts/setup.sh wrote them; background steps overlap)
# and every stage, by lane; then each lane's span in the run.
time_table() {
  local setup_times="$BUILD/setup-times.tsv" l
  echo "== wall time per part (CPU seconds: the stage's processes, user + sys)"
  if [[ -s $setup_times ]]; then
    awk -F'\t' '{printf "   setup %-58s %5d s  %6s  %s\n", $1, $2, ($4 == "" ? "" : $4 " CPU-s"), $3}' "$setup_times"
  fi
  printf '%s\n' "${times[@]}" | awk -F'\t' '{printf "   %-12s %-51s %5d s  %6s  %s\n", $1, $2, $3, ($5 == "" ? "" : $5 " CPU-s"), $4}'
  echo "== lanes (seconds into the run: start-end)"
  for l in setup checks integration benches molecule; do
    [[ -s $LANES/$l.span ]] && printf '   %-12s %s\n' "$l" "$(paste -sd- "$LANES/$l.span")"
  done
  printf '   wall time %d s (%d min), load at the end %s\n' "$WALL" "$((WALL / 60))" "$(cut -d' ' -f1-3 /proc/loadavg)"
}
time_table
if ((${#failed[@]})); then
  # CI keeps the tail of the output: the failed tests' names belong in it
  python scripts/failed_tests.py "$REPORTS"/pytest-*.xml || true
  printf 'FAILED stages: %s\n' "${failed[*]}"
  exit 1
fi
echo "all stages passed"
