"""Shared fixtures: the sandbox's services (read from the file that ``services.py start`` writes)."""

from __future__ import annotations

import os

import pytest

import hepvine.services


def pytest_addoption(parser):
    parser.addoption("--chaos", action="store_true",
                     help="run the slow fault tests marked `chaos` (`make chaos`); without it they are deselected")


def pytest_configure(config):
    # Declared here, not in pyproject.toml (whose every change rebuilds the sandbox).
    config.addinivalue_line("markers", "root: must run as root inside the sandbox (mount namespaces); `make test` "
                            "runs these in a second pass as root")
    config.addinivalue_line("markers", "chaos: a slow fault test on the real stack; run by `make chaos`, not by "
                            "`make test`")


def pytest_collection_modifyitems(config, items):
    """Without --chaos, the tests marked `chaos` are deselected (not skipped: `make chaos` runs them)."""
    if config.getoption("--chaos"):
        return
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if not item.get_closest_marker("chaos")]


@pytest.fixture(scope="session")
def services() -> dict:
    """Ports and directories of the running sandbox services. A test that needs them fails (never skips) when they
    are not up: the real stack is the point of those tests."""
    try:
        return hepvine.services.load()
    except hepvine.services.ServicesNotRunning as e:
        pytest.fail(f"{e} (the tests run with `make test`)")


@pytest.fixture
def condor_env(services) -> dict[str, str]:
    """The environment for HTCondor's command-line tools."""
    return dict(os.environ, CONDOR_CONFIG=services["condor"]["config"])
