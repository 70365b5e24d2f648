"""Shared fixtures of the workflow's tests: the sandbox's services (read from the file that ``services.py start``
writes) and root. The markers, the --chaos option and the fixtures ``workflow`` and ``condor_env`` are the executor
plugin's (its tests' pytest plugin, taskvine_fixtures), as are the helpers of its tests (snakemake_runs): their
directory goes on the path here, in this one place."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import hepvine.devtools.services

PLUGIN_TESTS = Path(__file__).resolve().parents[1] / "plugins" / "snakemake-executor-plugin-taskvine" / "tests"
sys.path.insert(0, str(PLUGIN_TESTS))
pytest_plugins = ["taskvine_fixtures"]

# The workflow's fixtures that need the sandbox's services (tests using them are marked `sandbox`).
from taskvine_fixtures import sandbox_fixtures  # noqa: E402  (found on the path set just above)

sandbox_fixtures("services", "as_root", "condor_env")
# Fixtures that run whole campaigns (tens of seconds each): the tests using them are marked `slow`, in `make test`
# and not in `make check`.
SLOW_FIXTURES = {"snakemake", "campaign", "new_campaign"}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: a whole campaign or a wait for a time limit (tens of seconds): `make test` runs it, the fast "
        "`make check` does not",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def services() -> dict:
    """Ports and directories of the running sandbox services. A test that needs them fails (never skips) when they
    are not up: the real stack is the point of those tests."""
    try:
        return hepvine.devtools.services.load()
    except hepvine.devtools.services.ServicesNotRunning as e:
        pytest.fail(f"{e} (the tests run with `make test`)")


@pytest.fixture
def as_root(request):
    """Fails (never skips) a test that needs root: mount namespaces, which only root can make in the sandbox.
    `make test` runs the tests marked `root` in its root pass."""
    if os.geteuid() != 0:
        pytest.fail(
            f"{request.node.nodeid} needs a mount namespace, which only root can make in the sandbox: `make "
            "test` runs it in its root pass (alone: `make test PYTEST_ARGS='-m root <this test>'`)"
        )
