"""The pytest plugin of the executor's tests, loaded by their conftest.py and by the workflow's tests/conftest.py
(`pytest_plugins`): the markers `sandbox`, `root`, `chaos`, `pool` and `alone`, the --chaos option, and the fixtures
`workflow` and `condor_env`. Nothing HEP in it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from snakemake_runs import Workflow


def pytest_addoption(parser):
    parser.addoption(
        "--chaos",
        action="store_true",
        help="run the slow fault tests marked `chaos` (`make chaos`); without it they are deselected",
    )


def pytest_configure(config):
    # A test run started in the background by a non-interactive shell (`make test &`, as CI scripts do) has SIGINT
    # ignored, and every snakemake it starts inherits that: the Ctrl-C tests would send a signal nobody hears (seen
    # twice: the run went on to its end). Ctrl-C is acted on again here, so the runs get Python's default.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "sandbox: needs the real services of the sandbox (HTCondor, TaskVine, XRootD); run through `make test`",
    )
    config.addinivalue_line(
        "markers",
        "root: must run as root inside the sandbox (mount namespaces); `make test` runs these in a pass of their own, "
        "as root",
    )
    config.addinivalue_line(
        "markers", "chaos: a slow fault test on the real stack; run by `make chaos`, not by `make test`"
    )
    config.addinivalue_line(
        "markers",
        "pool: uses the sandbox's whole HTCondor pool (or a directory other `pool` tests use too): `make test` runs "
        "these one at a time, beside the others",
    )
    config.addinivalue_line(
        "markers",
        "alone: must run with no other test at once (it looks at every process, job or run directory of the "
        "machine, or loads it fully); `make test` runs these in a pass of their own after the others",
    )


# Fixtures that need the sandbox's real services (the pool, the catalog, the XRootD servers): a test using any of
# them, directly or through another fixture, is marked `sandbox` here, so that `-m "not sandbox"` (the fast check)
# never runs it. Test suites that load this plugin add theirs with `sandbox_fixtures`.
SANDBOX_FIXTURES = {"workflow", "condor_env"}


def sandbox_fixtures(*names: str) -> None:
    """Declare more fixtures that need the sandbox's services (see SANDBOX_FIXTURES)."""
    SANDBOX_FIXTURES.update(names)


def pytest_collection_modifyitems(config, items):
    """Tests that use a sandbox fixture are marked `sandbox`; without --chaos, the tests marked `chaos` are
    deselected (not skipped: `make chaos` runs them)."""
    for item in items:
        if SANDBOX_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sandbox)
    if config.getoption("--chaos"):
        return
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if not item.get_closest_marker("chaos")]


@pytest.fixture
def workflow(tmp_path):
    return lambda snakefile: Workflow(tmp_path / "wf", snakefile)


@pytest.fixture
def condor_env() -> dict[str, str]:
    """The environment for HTCondor's command-line tools: this one, whose $CONDOR_CONFIG names the running pool's
    configuration. A test that needs the pool fails (never skips) without it: the real pool is the point."""
    config = os.environ.get("CONDOR_CONFIG")
    if not config or not Path(config).is_file():
        pytest.fail(
            f"no HTCondor configuration at $CONDOR_CONFIG={config!r}: run the tests where a pool runs "
            "(in a checkout that provides one, e.g. its `make test`)"
        )
    return dict(os.environ)
