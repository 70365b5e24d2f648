"""Fixtures of the plugin tests."""

from __future__ import annotations

import os

import pytest

from snakemake_runs import Workflow


@pytest.fixture
def workflow(tmp_path):
    return lambda snakefile: Workflow(tmp_path / "wf", snakefile)


@pytest.fixture
def as_root(request):
    """Fails (never skips) a test that needs root: mount namespaces, which only root can make in the sandbox.
    `make test` runs the tests marked `root` in its root pass."""
    if os.geteuid() != 0:
        pytest.fail(f"{request.node.nodeid} needs a mount namespace, which only root can make in the sandbox: `make "
                    "test` runs it in its root pass (alone: `make test PYTEST_ARGS='-m root <this test>'`)")
