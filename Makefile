# hepvine: every target builds or reuses the sandbox (a Debian trixie userland with HTCondor, TaskVine and XRootD)
# and runs inside it. Needs root on a Debian/Ubuntu host; see README.md.
SANDBOX := sandbox
ENTER := $(SANDBOX)/enter.sh
SERVICES := python3 $(SANDBOX)/services.py
WITH_SERVICES := $(SANDBOX)/with-services.sh
PYTEST_ARGS ?=
# make test TEST_WORKERS=N (and make check): pytest-xdist workers for the tests that may run beside others (0: in one
# process; make test then runs its passes one after another). The tests mostly wait on the services; beside these run
# the `pool` tests one by one and the `root` tests, then the `alone` tests (sandbox/with-services.sh).
TEST_WORKERS ?= 2
CMD ?=
# make demo DEMO_SITE=sandbox-gsi (or sandbox-token): the demo over the sandbox's GSI (or token) services: a profile
# and a site config of that name.
DEMO_SITE ?= sandbox
# make demo DEMO_RUCIO=1: the demo's dataset named through the sandbox's Rucio (containers, replicas at two sites);
# DEMO_RUCIO=failover: every file at both sites, the second preferred and taken down after its first read.
DEMO_RUCIO ?=
# make run CMD='...': the command reaches the shell as typed. Make would expand `$` in CMD when it exports it to the
# recipe's environment (`$HOME` -> `OME`, `$(...)` evaluated by make), so CMD is not exported; the run recipe gets
# its raw text, $(value CMD), in HEPVINE_RUN_CMD instead (tests/sandbox/test_make_run.py).
unexport CMD

.PHONY: help check sandbox services-start services-stop services-status shell run test chaos demo bench clean-sandbox

help:
	@echo "make demo            run the demo campaign end to end on the sandbox (DEMO_SITE=sandbox-gsi: over"
	@echo "                     its GSI origin and caches, reading with an X.509 proxy; sandbox-token: over its"
	@echo "                     token origin and caches, reading with a bearer token; DEMO_RUCIO=1: the dataset named"
	@echo "                     through the sandbox's Rucio; DEMO_RUCIO=failover: and one of its two sites taken down"
	@echo "                     mid-run, its files read at the other)"
	@echo "make check           the fast check (~1.5 min, no services): ruff, snakefmt, snakemake --lint, and every"
	@echo "                     test that needs neither the services nor root"
	@echo "make test            the tests (tests/ and the executor plugin's own) on the sandbox's real services"
	@echo "                     (PYTEST_ARGS='-k ...'), TEST_WORKERS=2 at once, beside them those marked pool one"
	@echo "                     by one and those marked root as root; then those marked alone, one by one"
	@echo "make chaos           the slow fault tests (tests/chaos: workers killed, caches down) on the sandbox"
	@echo "make bench           benchmarks on the sandbox; results in results/bench/"
	@echo "make shell           interactive shell in the sandbox as the analysis user, services up"
	@echo "make run CMD='...'   run one command that way; exits with its status"
	@echo "make services-stop   stop the sandbox's services"
	@echo "make clean-sandbox   stop the services and delete the sandbox and its state"

sandbox:
	@$(SANDBOX)/build.sh >/dev/null

services-start: sandbox
	@$(ENTER) --root -- $(SERVICES) start

services-stop:
	@if ls -d "$${HEPVINE_SANDBOX_HOME:-/var/tmp/hepvine-sandbox}"/rootfs-*/.hepvine-built >/dev/null 2>&1; then \
		$(ENTER) --root --no-build -- $(SERVICES) stop; fi

services-status: sandbox
	@$(ENTER) --root -- $(SERVICES) status

# shell and run hold the session lock while they run (with-services.sh) and leave the services up after.
shell: sandbox
	@echo "sandbox: services stay up after the shell ends; 'make services-stop' stops them" >&2
	@$(WITH_SERVICES) --keep-services bash -l

run: export HEPVINE_RUN_CMD = $(value CMD)
run: sandbox
	@[ -n "$$HEPVINE_RUN_CMD" ] || { echo "usage: make run CMD='command ...'" >&2; exit 2; }
	@$(WITH_SERVICES) --keep-services bash -c "$$HEPVINE_RUN_CMD"

# The fast check, before a commit and before `make test` in CI: formatting and lint (ruff, snakefmt), and every test
# that needs neither the sandbox's services nor root and runs no whole campaign (tests using a services fixture are
# marked `sandbox` by taskvine_fixtures, those running campaigns `slow` by tests/conftest.py), Snakemake's own linter
# on the workflow among them (tests/workflow/test_lint.py). No service starts; the userland is built or reused.
check: sandbox
	@$(ENTER) -- sh -c 'ruff format --check . && ruff check . && snakefmt --check Snakefile workflows/rules \
		&& python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not sandbox and not root and not slow" $(PYTEST_ARGS)'

test: sandbox
	@$(WITH_SERVICES) --pytest-passes $(TEST_WORKERS) python -m pytest --durations=30 $(PYTEST_ARGS)

# The slow fault tests (marked `chaos`: tests/chaos and a few plugin tests): not part of `make test` (the tests'
# pytest plugin, plugins/snakemake-executor-plugin-taskvine/tests/taskvine_fixtures.py, deselects them without
# --chaos). Both run the testpaths of pyproject.toml: tests/ and plugins/snakemake-executor-plugin-taskvine/tests/.
chaos: sandbox
	@$(WITH_SERVICES) python -m pytest --chaos -m chaos $(PYTEST_ARGS)

demo: sandbox
	@$(WITH_SERVICES) python -m hepvine.devtools.demo --profile profiles/$(DEMO_SITE) --site site-configs/$(DEMO_SITE).yaml \
		$(if $(DEMO_RUCIO),--rucio $(filter failover,$(DEMO_RUCIO)))

bench: sandbox
	@$(WITH_SERVICES) sh -c "python benchmarks/analysis.py && python benchmarks/processor.py && python benchmarks/processor.py --schema nanoaod --merge 10 --repeat 2 && python benchmarks/recompress.py && python benchmarks/dispatch.py && python benchmarks/manager_rate.py && python benchmarks/many_workers.py && python benchmarks/resolution.py && python benchmarks/loop.py"

clean-sandbox: services-stop
	@$(SANDBOX)/clean.sh
