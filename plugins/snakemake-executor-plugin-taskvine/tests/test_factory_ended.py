"""A factory that ends with an error during the run (here the real vine_factory refusing an option, as an older
cctools refuses a newer option) fails the run at once, naming its log and what it said, instead of leaving the run
waiting for workers that no one starts."""

from __future__ import annotations

import os
import stat

import pytest
from snakemake_runs import slow_snakefile

pytestmark = pytest.mark.sandbox


def test_a_factory_that_fails_fails_the_run_with_what_it_said(workflow, tmp_path, monkeypatch):
    real = next(
        os.path.join(d, "vine_factory")
        for d in os.environ["PATH"].split(os.pathsep)
        if os.access(os.path.join(d, "vine_factory"), os.X_OK)
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "vine_factory"
    wrapper.write_text(f'#!/bin/sh\nexec {real} --no-such-option "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    wf = workflow(slow_snakefile("echo {wildcards.i} > {output}", n=1))
    done = wf.run("--shared-fs-usage", "none", timeout=120)
    assert done.returncode != 0
    assert "the TaskVine factory vine_factory ended with exit status 1 during the run" in done.stderr, done.stderr
    assert "unrecognized option '--no-such-option'" in done.stderr
    assert "factory.log" in done.stderr
