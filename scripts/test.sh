#!/usr/bin/env bash
# The whole test suite. Run through `make test`, which installs first.
# Every stage runs even when an earlier one failed; the exit status says
# whether all passed, and the last lines list the stages that failed.
# A run cannot pass by not testing: pytest skips must be on tests/allowed-skips.txt and
# every test the suite holds must run (scripts/check_pytest_run.py); under CI=true the
# FLEETMEDIC_*_SKIP switches, the switches that replace a real part (a developer's own
# build of a test server, the patched Receptor) and extra pytest arguments are refused.
# Extra arguments go to pytest (a subset: then the count check is left out).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
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

failed=()
times=()  # "NAME<TAB>seconds<TAB>ok|FAILED" per stage, for the table at the end
stage() {  # stage NAME CMD...
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS st=ok
  if ! "$@"; then failed+=("$name"); st=FAILED; fi
  echo "== $name: $st ($((SECONDS - t0)) s)"
  times+=("$name"$'\t'"$((SECONDS - t0))"$'\t'"$st")
}
# Where the time went: setup's parts (scripts/setup.sh wrote them; background steps overlap,
# its wall time is the last setup line) and every stage.
time_table() {
  local setup_times="$ROOT/build/setup-times.tsv"
  echo "== wall time per part"
  if [[ -s $setup_times ]]; then
    awk -F'\t' '{printf "   setup %-52s %5d s  %6s  %s\n", $1, $2, ($4 == "" ? "" : $4 " CPU-s"), $3}' "$setup_times"
  fi
  printf '%s\n' "${times[@]}" | awk -F'\t' '{printf "   %-58s %5d s  %s\n", $1, $2, $3; t += $2} END {printf "   stages total %45s %5d s\n", "", t}'
  [[ -z ${lanes_wall:-} ]] || printf '   (bench and Molecule lanes side by side: %d s of wall time for both)\n' "$lanes_wall"
}

# pytest, then the check that nothing was skipped off the allow-list or left out.
pytest_all() {
  local report="$ROOT/build/test-reports/pytest.xml" expect=() n rc=0
  mkdir -p "$(dirname "$report")"
  rm -f "$report"
  if (($# == 0)); then
    # what the suite holds, without PYTEST_ADDOPTS (a deselection there must not hide)
    n="$(env -u PYTEST_ADDOPTS pytest --collect-only -q -p no:cacheprovider 2>/dev/null \
         | sed -n 's/^\([0-9]\+\) tests\? collected.*/\1/p' | tail -1)"
    [[ -n $n ]] || { echo "pytest --collect-only found no tests"; return 1; }
    expect=(--expect "$n")
  fi
  # In parallel (pytest-xdist): workers sized by CPUs and free memory, or
  # FLEETMEDIC_PYTEST_WORKERS (1: serial); tests sharing a heavy fixture stay on one worker
  # (tests/conftest.py). xdist writes one JUnit report for all workers.
  local workers par=()
  workers="$(python scripts/pytest_workers.py)" || return 1
  ((workers > 1)) && par=(-n "$workers" --dist loadscope)
  echo "pytest: $workers worker(s)${FLEETMEDIC_PYTEST_WORKERS:+ (FLEETMEDIC_PYTEST_WORKERS)}"
  # --durations: the slowest tests (and fixtures' setup) in the log, to see where time goes
  pytest --junitxml="$report" --durations=30 --durations-min=1 "${par[@]}" "$@" || rc=$?
  [[ -f $report ]] || return 1
  python scripts/check_pytest_run.py "$report" "${expect[@]}" || rc=1
  return "$rc"
}

stage "import layering (import-linter)" lint-imports --no-cache
stage "ruff lint (package, tests, bench, scripts, deploy)" ruff check controller tests bench scripts deploy
stage "ruff format (whole tree)" ruff format --check --quiet .
stage "mypy (package)" mypy
if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
  stage "ansible-lint (production profile)" ansible-lint --offline --profile production
fi
stage "collection build" ansible-galaxy collection build --force --output-path "$(mktemp -d)"
stage "ansible-test sanity (collection as built)" bash scripts/sanity.sh
stage "pytest" pytest_all "$@"
# Every bench/<name>.py (bench/_*.py are shared code) once with --smoke: tiny sizes, one
# trial, so a broken bench fails the run (bench/README.md).
bench_smokes() {
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
# The two lanes side by side: both mostly wait (reboots, SSH, API round trips; about 7 min
# each when serial), and each bench or scenario brings up its own fleet and API server on
# free subnets and ports. A lane's output is printed whole when both are done, so the log
# reads as if they ran one after the other. FLEETMEDIC_SERIAL_LANES=1 runs them in turn.
LANES="$ROOT/build/lanes"
# shellcheck disable=SC2030,SC2031  # a lane's arrays are its subshell's; collect_lane reads them back
run_lane() {  # run_lane NAME FUNCTION: FUNCTION's stages in a subshell; output, times, failures to files
  local name=$1 fn=$2
  (
    failed=() times=()
    "$fn"
    printf '%s\n' "${times[@]}" > "$LANES/$name.times"
    printf '%s\n' "${failed[@]}" > "$LANES/$name.failed"
  ) > "$LANES/$name.log" 2>&1
}
collect_lane() {  # print a lane's log, take its stage times and failures into this shell's
  local name=$1 line
  cat "$LANES/$name.log"
  while IFS= read -r line; do [[ -n $line ]] && times+=("$line"); done < "$LANES/$name.times"
  while IFS= read -r line; do [[ -n $line ]] && failed+=("$line"); done < "$LANES/$name.failed"
}
rm -rf "$LANES"; mkdir -p "$LANES"
lanes_t0=$SECONDS
if [[ ${FLEETMEDIC_SERIAL_LANES:-0} == 1 ]]; then
  run_lane benches bench_smokes
  run_lane molecule molecule_scenarios
else
  echo "== bench smokes and Molecule scenarios, side by side (each lane's log follows when both end)"
  run_lane benches bench_smokes & lane_b=$!
  run_lane molecule molecule_scenarios & lane_m=$!
  wait "$lane_b" "$lane_m"
fi
collect_lane benches
collect_lane molecule
lanes_wall=$((SECONDS - lanes_t0))

time_table
if ((${#failed[@]})); then
  printf 'FAILED stages: %s\n' "${failed[*]}"
  exit 1
fi
echo "all stages passed"
