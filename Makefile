# The two commands the README starts with: `make demo` and `make test`.
.PHONY: setup test demo lint clean image

setup:
	@bash scripts/setup.sh

test: setup
	@bash scripts/test.sh

demo: setup
	@bash scripts/demo.sh

# The agent's OCI image archive (deploy/image/build.sh): prints its path.
image: setup
	@bash deploy/image/build.sh

lint: setup
	@.venv/bin/lint-imports --no-cache
	@.venv/bin/ansible-lint --offline --profile production

clean:
	rm -rf .venv build dist *.egg-info controller/*.egg-info
