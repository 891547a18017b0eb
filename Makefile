# The two commands the README starts with: `make demo` and `make test`. Each builds what
# it uses (scripts/setup.sh's NEEDED_BY table): the demo only its parts, the test suite
# everything, as a bare `make setup` does.
.PHONY: setup setup-demo test demo lint clean image

setup:
	@bash scripts/setup.sh

setup-demo:
	@bash scripts/setup.sh demo

test: setup
	@bash scripts/test.sh

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
