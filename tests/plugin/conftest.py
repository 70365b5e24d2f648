"""Fixtures of the plugin tests."""

from __future__ import annotations

import pytest

from snakemake_runs import Workflow


@pytest.fixture
def workflow(tmp_path):
    return lambda snakefile: Workflow(tmp_path / "wf", snakefile)
