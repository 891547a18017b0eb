# The two commands the README starts with: `make demo` and `make test`. Each builds what
# it uses (scripts/setup.sh's NEEDED_BY table): the demo only its parts, the test suite
# everything, as a bare `make setup` does. `make test` runs setup itself (scripts/test.sh),
# so the static checks and unit tests start once the virtualenv is ready, beside the Go
# builds.
.PHONY: setup setup-demo test demo lint clean image timings cpu-profile

setup:
	@bash scripts/setup.sh

setup-demo:
	@bash scripts/setup.sh demo

test:
	@bash scripts/test.sh

# Fold the last `make test`'s recorded seconds per test (build/test-reports/durations-*.json)
# into tests/timings.json, the committed file pytest orders its work by (longest first).
timings:
	@python3 scripts/timings.py refresh

# Where a pytest run's CPU goes, by program (nodes' apart), from the kernel's process
# accounting, e.g. make cpu-profile ARGS='-n 2 tests/integration/test_controller_e2e.py'.
cpu-profile: setup
	@python3 scripts/cpu_profile.py -- .venv/bin/python -m pytest -p no:cacheprovider $(ARGS)

demo: setup-demo
	@bash scripts/demo.sh

# The agent's OCI image archive (deploy/image/build.sh): prints its path.
image: setup
	@bash deploy/image/build.sh

lint: setup
	@.venv/bin/lint-imports --no-cache
	@.venv/bin/ansible-lint --offline --profile production

clean:
	rm -rf .venv build dist *.egg-info controller/*.egg-info
