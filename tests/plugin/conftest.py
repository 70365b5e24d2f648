"""Helpers for running Snakemake with the TaskVine executor the way a user does: the `snakemake` command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


class Workflow:
    """A workflow directory with a Snakefile, run with `snakemake --executor taskvine`."""

    def __init__(self, root: Path, snakefile: str):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "Snakefile").write_text(textwrap.dedent(snakefile))

    def run(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "snakemake", "--executor", "taskvine", "--jobs", "4", *args]
        done = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done

    def popen(self, *args: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "snakemake", "--executor", "taskvine", "--jobs", "4", *args]
        return subprocess.Popen(cmd, cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def workflow(tmp_path):
    return lambda snakefile: Workflow(tmp_path / "wf", snakefile)
